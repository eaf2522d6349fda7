"""The ledger: what each host's GPUs were used for, by whom, kept beside the claims.

Part of the agent program (`__init__.py`): stdlib only, Python >= 3.8, Linux, no tfctl imports.
The agent files are one module on the hosts, so every top-level name here carries
`ledger`/`LEDGER` (or is a class named for it). The format and its rules are in docs/usage.md.

The ledger folder is `ledger/` inside the claims folder (claims.py: mode 1777, made by the first
writer), and its files are read exactly as claims are (`read_folder`): the owner is the file's
uid, a file named after another user than its owner is skipped, links are never followed, each
owner's files are bounded on their own, so one user's flood hides nobody else's use. Three
kinds of file, `<user>.<kind>.<id>.json`:

- `run` / `session`: one per tfctl run (or session) on this host, written by the run's watcher
  (`RunLedger`, a thread of the watcher, watch.py) every LEDGER_WRITE_S seconds and at its end,
  so a run cut short still counts up to its last write. A GPU is held while a task of the run
  whose CUDA_VISIBLE_DEVICES names it has started and not ended (as energy.py counts a hold),
  measured by the watcher's monotonic clock, so a wall clock that jumps adds or removes nothing.
  Held idle: the seconds the recorder's latest sample of that GPU (gpu.csv, one a second) was
  under the idle threshold; energy: the recorder's power.draw times the seconds (the whole
  board, as energy.py says).
- `seen`: what tfctl's samplers saw of processes tfctl did not start: per GPU, pid and
  wall-clock minute, how many samples saw it, how many of those under the threshold, and the
  board's power. Two samplers: a user's idle sampler of `tfctl lab` (lab.py: every `sample_s`,
  10 s at most, while that user has run `tfctl lab` in the last hour, LINGER_S), and each run's
  recorder (record.py's owners, every OWNER_EVERY_S = 10 s while a tfctl run's watcher runs on
  the host). A process is counted only for the minutes some sampler saw it, a minute it was
  seen in as a whole minute. Two samplers (two users', two workdirs', a recorder and a lab
  sampler) that saw the same GPU, pid and minute count it once (`ledger_seen_minutes`: the look
  with more samples is kept).

Amounts are kept per wall-clock hour (epoch seconds // 3600), so a window (`--since`) and days
are cut on hours. A number read back that is negative, or more than an hour's seconds in one
hour, is clamped: a clock that jumped (or a hand-edited file) gives no negative hours.
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
import time
from typing import Any

from tfctl.remote.agent.claims import (
    claims_dir,
    ensure_folder,
    read_claims,
    read_folder,
    write_own_file,
)
from tfctl.remote.agent.energy import energy_mask_indices
from tfctl.remote.agent.jsonfile import read_json
from tfctl.remote.agent.policy import read_policy, session_kind
from tfctl.remote.agent.proc import proc_stat, proc_tags, proc_uid, user_name
from tfctl.remote.agent.rundir import task_file
from tfctl.remote.agent.vocab import UsageAnswer, UsageRequest
from tfctl.remote.agent.wire import json_dumps

LEDGER_FORMAT = "tfctl-ledger/1"
LEDGER_SUBDIR = "ledger"
LEDGER_KINDS = ("run", "session", "seen")
LEDGER_MAX_BYTES = 1 << 20
"""A ledger file's size limit: a run's file holds an entry per GPU per hour (a week on 8 GPUs:
about 60 KiB); a sampler's day, one per process and minute seen."""
LEDGER_FILES_PER_OWNER = 4096
"""Ledger files of one owner read in one look (its runs and sampler days of the window)."""
LEDGER_IDLE_UTIL_PCT = 5.0
"""A GPU is held idle while its utilization is under this (the lab policy's
`idle.below_util_pct` where the host has one: `ledger_idle_pct`)."""
LEDGER_WRITE_S = 10.0
LEDGER_TICK_S = 1.0
LEDGER_MAX_STEP_S = 60.0
"""The longest step one tick counts (a watcher stopped or the host suspended counts no more)."""
LEDGER_FRESH_S = 5.0
"""A recorder sample older than this says nothing of the GPU now (idle and energy unknown)."""
LEDGER_HOUR = 3600
LEDGER_MINUTE = 60
LEDGER_WEEK_S = 7 * 86400.0
LEDGER_KEEP_S = 400 * 86400.0
"""Our own ledger files not written for this long are removed by our next writer (a year of
`usage --since` and some), so the folder does not grow for ever."""


LEDGER_POLICY_REREAD_S = 10.0
"""How long the policy's threshold is kept before its file is read again (as the watcher does)."""
_policy_pct_read: list[float] = [-LEDGER_POLICY_REREAD_S, LEDGER_IDLE_UTIL_PCT]
"""[when it was read (monotonic s), the threshold then]: the last reading of the policy."""


def ledger_idle_pct() -> float:
    """The idle threshold, in one place: the lab policy's `idle.below_util_pct` where the host
    has a policy in force (remote/agent/policy.py), else LEDGER_IDLE_UTIL_PCT; the file is read
    at most once per LEDGER_POLICY_REREAD_S."""
    now = time.monotonic()
    if now - _policy_pct_read[0] >= LEDGER_POLICY_REREAD_S:
        rule = (read_policy().get("policy") or {}).get("idle") or {}
        _policy_pct_read[:] = [now, float(rule.get("below_util_pct", LEDGER_IDLE_UTIL_PCT))]
    return _policy_pct_read[1]


def ledger_dir() -> str:
    return os.path.join(claims_dir(), LEDGER_SUBDIR)


def ledger_file_name(user: str, kind: str, ident: str) -> str:
    safe = "".join(c if c.isalnum() or c in "_-" else "_" for c in ident[:120])
    return f"{user}.{kind}.{safe}.json"


def ledger_own(kind: str, ident: str) -> dict[str, Any] | None:
    """Our own ledger file `<me>.<kind>.<ident>.json` as its raw JSON, where we wrote one (a
    watcher or sampler started again goes on counting from it); None otherwise. Only a regular
    file we own is read."""
    me = user_name(os.getuid()) or str(os.getuid())
    path = os.path.join(ledger_dir(), ledger_file_name(me, kind, ident))
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.getuid() \
                or st.st_size > LEDGER_MAX_BYTES:
            return None
        data = f.read(LEDGER_MAX_BYTES + 1)
    try:
        raw = json.loads(data.decode("utf-8"))
        ledger_parse(raw, kind)  # only a record others could read too
    except (ValueError, RecursionError):
        return None
    return dict(raw)


def ledger_write(kind: str, ident: str, record: dict[str, Any]) -> None:
    """Write (or replace) our ledger file `<me>.<kind>.<ident>.json` atomically. OSError or
    ValueError when it cannot (the folder is unusable, or the record too large)."""
    folder = ledger_dir()
    for needed in (claims_dir(), folder):
        problem = ensure_folder(needed)
        if problem:
            raise ValueError(problem)
    me = user_name(os.getuid()) or str(os.getuid())
    text = json_dumps(dict(record, format=LEDGER_FORMAT, kind=kind, user=me), sort_keys=True)
    if len(text) > LEDGER_MAX_BYTES:
        raise ValueError(f"the ledger record would be over {LEDGER_MAX_BYTES} bytes")
    write_own_file(os.path.join(folder, ledger_file_name(me, kind, ident)), me, kind, text)


def ledger_sweep_own(now_s: float, folder: str | None = None) -> list[str]:
    """Remove our own ledger files last written more than LEDGER_KEEP_S ago; their names.
    Only files whose owner is us (the sticky bit would refuse the others anyway)."""
    folder = folder or ledger_dir()
    removed = []
    with contextlib.suppress(OSError), os.scandir(folder) as entries:
        for entry in entries:
            with contextlib.suppress(OSError):
                st = entry.stat(follow_symlinks=False)
                if st.st_uid == os.getuid() and stat.S_ISREG(st.st_mode) \
                        and entry.name.endswith(".json") and st.st_mtime < now_s - LEDGER_KEEP_S:
                    os.unlink(entry.path)
                    removed.append(entry.name)
    return removed


# ---------------------------------------------------------------- reading (other users' data)

def ledger_amount(value: Any, cap: float | None = None) -> float:
    """A number of a ledger file, never negative, at most `cap`; 0 for anything else."""
    if not isinstance(value, (int, float)) or isinstance(value, bool) or value != value:
        return 0.0
    number = max(0.0, float(value))
    return number if cap is None else min(number, cap)


def ledger_hours(raw: Any) -> dict[int, list[float]]:
    """`{hour: [held_s, idle_s, energy_j or null, power_s]}` checked: an hour holds at most an
    hour's seconds, idle at most what was held, nothing negative."""
    if not isinstance(raw, dict):
        raise ValueError("hours is not an object")
    out: dict[int, list[float]] = {}
    for key, cell in list(raw.items())[:24 * 400]:
        if not str(key).isdigit() or not isinstance(cell, list) or len(cell) < 2:
            raise ValueError(f"bad hour {str(key)[:20]!r}")
        held = ledger_amount(cell[0], LEDGER_HOUR)
        idle = min(ledger_amount(cell[1], LEDGER_HOUR), held)
        energy = ledger_amount(cell[2]) if len(cell) > 2 else 0.0
        power_s = min(ledger_amount(cell[3], LEDGER_HOUR), held) if len(cell) > 3 else 0.0
        out[int(key)] = [held, idle, energy, power_s]
    return out


def ledger_text(value: Any, limit: int = 200) -> str | None:
    return None if value is None else str(value)[:limit]


def ledger_parse(raw: Any, kind: str) -> dict[str, Any]:
    """The checked fields of a ledger file's JSON (ValueError for anything else); pure. The
    owner is not among them: it comes from the file."""
    if not isinstance(raw, dict) or raw.get("format") != LEDGER_FORMAT:
        raise ValueError(f"not a {LEDGER_FORMAT} record")
    if raw.get("kind") != kind:
        raise ValueError(f"its name says {kind}, its record {raw.get('kind')!r}")
    gpus = raw.get("gpus") or {}
    if not isinstance(gpus, dict) or len(gpus) > 64:
        raise ValueError("gpus is not an object of at most 64 GPUs")
    if kind == "seen":
        procs = raw.get("procs") or {}
        if not isinstance(procs, dict):
            raise ValueError("procs is not an object")
        seen = {}
        for key, proc in procs.items():
            uuid, _, pid = str(key).rpartition(" ")
            minutes = proc.get("minutes") if isinstance(proc, dict) else None
            if not pid.isdigit() or not isinstance(minutes, dict):
                raise ValueError(f"bad process {str(key)[:40]!r}")
            uid = proc.get("uid")
            seen[(uuid[:64], int(pid))] = {
                "uid": uid if isinstance(uid, int) and not isinstance(uid, bool) else None,
                "index": proc.get("index") if isinstance(proc.get("index"), int) else None,
                "command": ledger_text(proc.get("command")),
                "minutes": {int(m): [ledger_amount(c[0]), ledger_amount(c[1]),
                                     ledger_amount(c[2]), ledger_amount(c[3])]
                            for m, c in minutes.items()
                            if str(m).isdigit() and isinstance(c, list) and len(c) == 4}}
        return {"kind": kind, "procs": seen}
    checked = {}
    for key, gpu in gpus.items():
        if not isinstance(gpu, dict):
            raise ValueError("a GPU is not an object")
        index = gpu.get("index")
        checked[str(key)[:64]] = {
            "index": index if isinstance(index, int) and not isinstance(index, bool) else None,
            "uuid": ledger_text(gpu.get("uuid"), 64), "name": ledger_text(gpu.get("name"), 100),
            "hours": ledger_hours(gpu.get("hours") or {})}
    return {"kind": kind, "run_id": ledger_text(raw.get("run_id"), 120),
            "job": ledger_text(raw.get("job")), "gpus": checked}


def ledger_read(since_s: float, folder: str | None = None
                ) -> tuple[list[dict[str, Any]], list[str]]:
    """Every ledger file written since `since_s` (by its mtime: an older file holds nothing of
    the window and is not opened), and one warning per owner whose files were skipped."""
    def recent(name: str, st: os.stat_result) -> bool:
        return st.st_mtime >= since_s or not stat.S_ISREG(st.st_mode)

    return read_folder(folder or ledger_dir(), "ledger folder", LEDGER_KINDS, LEDGER_MAX_BYTES,
                       ledger_parse, LEDGER_FILES_PER_OWNER, recent)


def ledger_seen_minutes(records: list[dict[str, Any]]
                        ) -> dict[tuple[str, int, int], tuple[dict[str, Any], list[float]]]:
    """The samplers' minutes, each (GPU uuid, pid, minute) once: of two looks at the same one
    (two users' samplers, or two of one user's) the one with more samples is kept, the first
    file's on a tie. → (the process as its sampler described it, [samples, low, watts summed,
    power samples])."""
    merged: dict[tuple[str, int, int], tuple[dict[str, Any], list[float]]] = {}
    for record in sorted((r for r in records if r["kind"] == "seen"), key=lambda r: r["file"]):
        for (uuid, pid), proc in record["procs"].items():
            for minute, cell in proc["minutes"].items():
                key = (uuid, pid, minute)
                if cell[0] > 0 and (key not in merged or cell[0] > merged[key][1][0]):
                    merged[key] = (proc, cell)
    return merged


def ledger_rows(records: list[dict[str, Any]], since_s: float, until_s: float
                ) -> list[dict[str, Any]]:
    """The ledger as rows, one per user, kind, run (or process), GPU and hour of the window:
    `{user, kind, id, job, gpu, index, hour, held_s, idle_s, energy_j, power_s}`; pure.
    `energy_j` counts only the `power_s` seconds that had a power reading."""
    first, last = int(since_s // LEDGER_HOUR), int(until_s // LEDGER_HOUR)
    rows = []
    for record in records:
        if record["kind"] == "seen":
            continue
        for key, gpu in record["gpus"].items():
            for hour, (held, idle, energy, power_s) in gpu["hours"].items():
                if first <= hour <= last and held > 0:
                    rows.append({"user": record["user"], "kind": record["kind"],
                                 "id": record["run_id"], "job": record["job"],
                                 "gpu": gpu["uuid"] or key, "index": gpu["index"], "hour": hour,
                                 "held_s": round(held, 3), "idle_s": round(idle, 3),
                                 "energy_j": round(energy, 3), "power_s": round(power_s, 3)})
    per_gpu_minute: dict[tuple[str, int], int] = {}
    seen = ledger_seen_minutes(records)
    for uuid, _, minute in seen:
        per_gpu_minute[(uuid, minute)] = per_gpu_minute.get((uuid, minute), 0) + 1
    summed: dict[tuple[Any, ...], dict[str, Any]] = {}
    for (uuid, pid, minute), (proc, (samples, low, watts, power_n)) in sorted(seen.items()):
        hour = minute * LEDGER_MINUTE // LEDGER_HOUR
        if not first <= hour <= last:
            continue
        user = user_name(proc["uid"]) if proc["uid"] is not None else "?"
        key = (user, pid, uuid, hour)
        row = summed.setdefault(key, {
            "user": user, "kind": "other", "id": f"pid {pid}", "job": proc["command"],
            "gpu": uuid, "index": proc["index"], "hour": hour, "held_s": 0.0, "idle_s": 0.0,
            "energy_j": 0.0, "power_s": 0.0})
        row["held_s"] += LEDGER_MINUTE
        row["idle_s"] += LEDGER_MINUTE * min(1.0, low / samples)
        if power_n:  # the board's power, shared by the processes seen on it that minute
            row["energy_j"] += watts / power_n * LEDGER_MINUTE / per_gpu_minute[(uuid, minute)]
            row["power_s"] += LEDGER_MINUTE
    rows += [dict(r, energy_j=round(r["energy_j"], 3), idle_s=round(r["idle_s"], 3))
             for r in summed.values()]
    return rows


def ledger_week_held(now_s: float) -> tuple[dict[str, list[float]], list[str]]:
    """Per user, [GPU-seconds held, of them idle] on this host in the last 7 days (for `lab`'s
    share this week), and the ledger's warnings."""
    records, warnings = ledger_read(now_s - LEDGER_WEEK_S)
    totals: dict[str, list[float]] = {}
    for row in ledger_rows(records, now_s - LEDGER_WEEK_S, now_s):
        held = totals.setdefault(row["user"], [0.0, 0.0])
        held[0] += row["held_s"]
        held[1] += row["idle_s"]
    return {u: [round(h, 1), round(i, 1)] for u, (h, i) in totals.items()}, warnings


def op_usage(req: UsageRequest) -> UsageAnswer:
    """The ledger's rows of the window (`tfctl usage`), every user's, read as claims are."""
    now_s = time.time()
    since_s = float(req.since_s or 0)  # REQUIRED: given
    records, warnings = ledger_read(since_s)
    return UsageAnswer(tuple(ledger_rows(records, since_s, now_s)), tuple(warnings), now_s,
                       ledger_idle_pct())


# ---------------------------------------------------------------- a run's watcher writes it

class RunLedger:
    """What a run holds on this host, counted by a thread of its watcher: each LEDGER_TICK_S
    the GPUs of the tasks that have started and not ended, idle where the recorder's fresh
    sample says so, their power; written every LEDGER_WRITE_S and by `stop`."""

    def __init__(self, run_dir: str, run_id: str, manifest: dict[str, Any],
                 recorder: Any) -> None:
        import hashlib
        import threading

        self.run_dir, self.run_id = run_dir, run_id
        self.kind = "session" if session_kind(manifest) else "run"
        self.job = manifest.get("inventory")
        self.masks = {t["name"]: str((t.get("env") or {}).get(
            "CUDA_VISIBLE_DEVICES", t.get("cuda_visible_devices")) or "")
            for t in manifest.get("tasks", [])}
        self.started_s = float(recorder.started)  # gpu.csv's times count from it
        self.seen = SeenLedger("w" + hashlib.sha1(run_dir.encode()).hexdigest()[:8])
        recorder.on_owners = self.saw_owners  # the recorder's owners, every OWNER_EVERY_S
        self.gpus: dict[str, dict[str, Any]] = {}
        self.latest: dict[int, tuple[float, float | None, float | None]] = {}
        self.offset = 0
        self.last_tick = time.monotonic()
        self.last_write = 0.0
        self.warned = False
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._loop, daemon=True)
        before = ledger_own(self.kind, run_id)  # a watcher started again goes on from it
        if before is not None:
            for key, gpu in ledger_parse(before, self.kind)["gpus"].items():
                self.gpus[key] = dict(gpu, hours={str(h): c for h, c in gpu["hours"].items()})

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        """The last tick counted and written (from the watcher's end)."""
        self.done.set()
        self.thread.join(10 * LEDGER_TICK_S)
        self.tick(time.monotonic(), time.time())
        self.write()

    def _loop(self) -> None:
        ledger_sweep_own(time.time())
        while not self.done.wait(LEDGER_TICK_S):
            try:
                self.tick(time.monotonic(), time.time())
                if time.monotonic() - self.last_write >= LEDGER_WRITE_S:
                    self.write()
            except Exception as exc:  # the ledger never ends the watcher
                self._warn(f"the ledger failed: {exc!r}")

    def saw_owners(self, t: float, index_of: dict[str, str], rows: list[list[str]]) -> None:
        """The recorder's look at who computes on the host's GPUs (its thread): the processes
        tfctl did not start go into the ledger as a sampler's sightings, with the GPUs'
        latest utilization and power from the recorder's stream."""
        now_t = t - self.started_s
        gpus = []
        for uuid, index in index_of.items():
            if not str(index).isdigit():
                continue
            sample_t, util, watts = self.latest.get(int(index), (-1e9, None, None))
            fresh = now_t - sample_t <= LEDGER_FRESH_S
            gpus.append({"index": int(index), "uuid": uuid,
                         "utilization_pct": util if fresh else None,
                         "power_w": watts if fresh else None})
        apps = [{"gpu_uuid": row[0], "pid": int(row[1])} for row in rows
                if len(row) >= 2 and row[1].isdigit()]
        others = ledger_others(apps, read_claims()[0])
        if others:
            with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
                self.seen.note(t, gpus, apps, others)

    def holding(self) -> list[int]:
        """The GPU indices the run's tasks hold now (started, not ended)."""
        known = [(g["index"], g["uuid"] or "") for g in self.gpus.values()]
        held: list[int] = []
        for name, mask in self.masks.items():
            if os.path.exists(task_file(self.run_dir, name, ".pid.json")) and \
                    not os.path.exists(task_file(self.run_dir, name, ".exit.json")):
                held += [i for i in energy_mask_indices(mask, known) if i not in held]
        return held

    def tick(self, mono_s: float, wall_s: float) -> None:
        """Count the seconds since the last tick (monotonic: a wall clock's jump adds nothing)
        on the GPUs held now, in the wall clock's hour."""
        step = min(max(0.0, mono_s - self.last_tick), LEDGER_MAX_STEP_S)
        self.last_tick = mono_s
        self._learn_gpus()
        self._read_samples()
        hour = str(int(wall_s // LEDGER_HOUR))
        now_t = wall_s - self.started_s
        for index in self.holding():
            gpu = self.gpus.setdefault(str(index), {"index": index, "uuid": None, "name": None,
                                                    "hours": {}})
            cell = gpu["hours"].setdefault(hour, [0.0, 0.0, 0.0, 0.0])
            cell[0] += step
            t, util, watts = self.latest.get(index, (-1e9, None, None))
            if now_t - t <= LEDGER_FRESH_S:
                if util is not None and util < ledger_idle_pct():
                    cell[1] += step
                if watts is not None:
                    cell[2] += watts * step
                    cell[3] += step

    def _learn_gpus(self) -> None:
        """The host's GPUs (index, uuid, name) once the recorder has listed them."""
        if any(g["uuid"] for g in self.gpus.values()):
            return
        for gpu in (read_json(os.path.join(self.run_dir, "gpus.json")) or {}).get("gpus", []):
            with contextlib.suppress(KeyError, ValueError, TypeError):
                entry = self.gpus.setdefault(str(int(gpu["index"])), {
                    "index": int(gpu["index"]), "hours": {}})
                entry.update(uuid=gpu.get("uuid"), name=gpu.get("name"))

    def _read_samples(self) -> None:
        """The recorder's samples since the last look (gpu.csv: t_s, index, util %, memory,
        temperature, power W, throttle), the latest of each GPU kept."""
        try:
            with open(os.path.join(self.run_dir, "gpu.csv"), "rb") as csv:
                csv.seek(self.offset)
                data = csv.read(1 << 20)
        except OSError:
            return
        end = data.rfind(b"\n") + 1
        self.offset += end
        for line in data[:end].decode("utf-8", "replace").splitlines():
            cells = line.split(",")
            if len(cells) < 6 or not cells[0].isdigit() or not cells[1].isdigit():
                continue
            self.latest[int(cells[1])] = (float(cells[0]), ledger_float(cells[2]),
                                          ledger_float(cells[5]))

    def write(self) -> None:
        """Our ledger file of the run, once it has held a GPU (a run on CPUs leaves none)."""
        self.last_write = time.monotonic()
        if not any(g["hours"] for g in self.gpus.values()):
            return
        record = {"run_id": self.run_id, "job": self.job, "since": self.started_s,
                  "last": time.time(),
                  "gpus": {k: dict(g, hours={h: [round(v, 3) for v in c]
                                             for h, c in g["hours"].items()})
                           for k, g in self.gpus.items() if g["hours"]}}
        try:
            ledger_write(self.kind, self.run_id, record)
        except (OSError, ValueError) as exc:
            self._warn(f"no ledger kept for run {self.run_id}: {exc}")

    def _warn(self, text: str) -> None:
        if not self.warned:  # once, into the watcher's log
            self.warned = True
            print(text, flush=True)


def ledger_float(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


# ---------------------------------------------------------------- a sampler's sightings

class SeenLedger:
    """What one idle sampler (lab.py) saw of processes tfctl did not start, kept per UTC day in
    `<me>.seen.<YYYYMMDD>-<tag>.json` (`tag`: which sampler of this user, so that two of one
    user's samplers never write each other's file)."""

    def __init__(self, tag: str) -> None:
        self.tag = "".join(c for c in tag if c.isalnum())[:16]
        self.day = ""
        self.procs: dict[str, dict[str, Any]] = {}

    def note(self, t: float, gpus: list[dict[str, Any]], apps: list[dict[str, Any]],
             others: dict[int, int | None]) -> None:
        """One sample at `t`: nvidia-smi's GPUs (utilization_pct, power_w) and compute apps;
        `others`: pid → uid of the apps tfctl did not start (the rest are counted by their
        runs' watchers). Written at once."""
        day = time.strftime("%Y%m%d", time.gmtime(t))
        if day != self.day:
            self.day, self.procs = day, self._load(day)
            ledger_sweep_own(t)
        by_uuid = {g["uuid"]: g for g in gpus}
        minute = str(int(t // LEDGER_MINUTE))
        for app in apps:
            gpu = by_uuid.get(app["gpu_uuid"])
            if gpu is None or app["pid"] not in others:
                continue
            proc = self.procs.setdefault(f"{app['gpu_uuid']} {app['pid']}", {
                "uid": others[app["pid"]], "index": gpu["index"], "command": None,
                "minutes": {}})
            cell = proc["minutes"].setdefault(minute, [0, 0, 0.0, 0])
            util, watts = gpu.get("utilization_pct"), gpu.get("power_w")
            cell[0] += 1
            cell[1] += int(util is not None and util < ledger_idle_pct())
            if watts is not None:
                cell[2] = round(cell[2] + watts, 2)
                cell[3] += 1
        if self.procs:
            ledger_write("seen", f"{day}-{self.tag}", {"procs": self.procs})

    def _load(self, day: str) -> dict[str, dict[str, Any]]:
        """Our own file of `day`, where this sampler wrote one before (a sampler restarted)."""
        return dict((ledger_own("seen", f"{day}-{self.tag}") or {}).get("procs") or {})


def ledger_others(apps: list[dict[str, Any]], claims: list[dict[str, Any]]
                  ) -> dict[int, int | None]:
    """pid → uid of the compute apps that are no tfctl run's: not a task (pid or process
    group) of a live run claim, and not tagged as a run of ours."""
    ids = {t[k] for c in claims if c.get("kind") == "run" and c.get("state") == "live"
           for t in c.get("tasks") or [] for k in ("pid", "pgid") if t.get(k)}
    out: dict[int, int | None] = {}
    for pid in {a["pid"] for a in apps}:
        found = proc_stat(pid)
        if found is None or pid in ids or found[1] in ids or proc_tags(pid)[0]:
            continue
        out[pid] = proc_uid(pid)
    return out
