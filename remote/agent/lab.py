"""One host as the lab sees it, reservations, and the idle sampler (`lab`, `reserve`, `release`).

Part of the agent program (`__init__.py`): stdlib only, Python >= 3.8, Linux, no tfctl imports.
Its operations are in the table of `optable.py`.

`lab` answers in one request everything `tfctl lab` shows of a host: nvidia-smi's GPUs and
compute apps, who each of those processes is (/proc: uid, command, start time, process group),
the claims (claims.py), how long each holder has kept its GPU under IDLE_UTIL_PCT, and each
user's GPU-seconds on this host in the last 7 days (the ledger, ledger.py).

Idle time is measured, never guessed: a sampler (one per user and workdir on the host, started
by the first `lab` request and ending LINGER_S after the last) reads utilization and compute
apps every `sample_s` seconds and keeps, per GPU and pid, when the current run of low samples
began; a gap of more than GAP_SAMPLES samples restarts it. A holder is shown idle for the time
since that start, and only while the sampler's last sample is recent. Each sample also goes
into the ledger (ledger.py's `SeenLedger`): the processes tfctl did not start, per minute.
"""

from __future__ import annotations

import contextlib
import os
import time
from typing import Any

from tfctl.remote.agent.claims import (
    claim_file_name,
    parse_claim,
    process_since,
    read_claims,
    remove_claim,
    sweep_own,
    write_claim,
)
from tfctl.remote.agent.detach import fork_detached
from tfctl.remote.agent.jsonfile import read_json, write_json
from tfctl.remote.agent.ledger import SeenLedger, ledger_others, ledger_week_held
from tfctl.remote.agent.policy import read_policy
from tfctl.remote.agent.proc import cmdline, proc_stat, proc_tags, proc_uid, user_name
from tfctl.remote.agent.rundir import expand
from tfctl.remote.agent.vocab import (
    ClaimsAnswer,
    ClaimsRequest,
    GpuState,
    HostUser,
    LabPolicy,
    LabPolicyRequest,
    LabRequest,
    ReleaseAnswer,
    ReleaseRequest,
    ReserveAnswer,
    ReserveRequest,
)
from tfctl.remote.agent.wire import AgentError, which

IDLE_UTIL_PCT = 5.0
SAMPLE_S = 10.0
LINGER_S = 3600.0
GAP_SAMPLES = 3
LAB_FOLDER = ".tfctl/lab"
GPU_QUERY = "index,uuid,memory.used,memory.total,utilization.gpu,power.draw,name"
APP_QUERY = "gpu_uuid,pid,used_memory"
NO_NVIDIA_SMI = "no nvidia-smi on the PATH there"
"""The answer's `error` of a host without nvidia-smi (a CPU-only host, where the inventory
says so: remote/lab/view.py)."""


# ---------------------------------------------------------------- nvidia-smi, read plainly

def _value(text: str) -> float | None:
    """A CSV cell as a number; None for `[N/A]`, `[Not Supported]` and the like."""
    try:
        return float(text.strip())
    except ValueError:
        return None


def parse_gpu_lines(text: str) -> list[dict[str, Any]]:
    """`--query-gpu=GPU_QUERY --format=csv,noheader,nounits` rows; other lines are skipped.
    The name comes last, so a comma in it is kept."""
    gpus = []
    for line in text.splitlines():
        cells = [c.strip() for c in line.split(",", 6)]
        if len(cells) != 7 or not cells[0].isdigit():
            continue
        gpus.append({"index": int(cells[0]), "uuid": cells[1], "memory_used_mib": _value(cells[2]),
                     "memory_total_mib": _value(cells[3]), "utilization_pct": _value(cells[4]),
                     "power_w": _value(cells[5]), "name": cells[6]})
    return gpus


def parse_app_lines(text: str) -> list[dict[str, Any]]:
    """`--query-compute-apps=APP_QUERY --format=csv,noheader,nounits` rows."""
    apps = []
    for line in text.splitlines():
        cells = [c.strip() for c in line.split(",")]
        if len(cells) != 3 or not cells[1].isdigit():
            continue
        apps.append({"gpu_uuid": cells[0], "pid": int(cells[1]),
                     "used_memory_mib": _value(cells[2])})
    return apps


LAB_NVSMI_TIMEOUT_S = 30.0


class LabNvsmiReading:
    """nvidia-smi's GPUs and compute apps, its two selective queries started at once.

    A driver answers one selective query per call: its help lists `--query-gpu` and
    `--query-compute-apps` under `[one of]` (every capture in tests/support/data/nvidia-smi).
    The one call that holds both, `nvidia-smi -q` (or `-q -x`), reads every property of every
    GPU: measured at 0.39 s against 0.007 s for a `--query-gpu` on one GPU
    (netdata/netdata#10362) and 0.59 s against 0.07 s on eight (influxdata/telegraf#8534), so
    it would make `lab` slower on real hosts. The two queries run side by side instead: a host
    answers in the time of one call, and a driver without persistence mode initialises the
    GPUs once for both (it does so when a GPU's first client starts and undoes it when the
    last one ends, 1-3 s per GPU: https://docs.nvidia.com/deploy/driver-persistence/), where
    one call after the other would pay that twice. Meanwhile the caller reads what needs no
    nvidia-smi (the claims); `result()` waits for both, `LAB_NVSMI_TIMEOUT_S` in all.
    """

    def __init__(self, timeout_s: float = LAB_NVSMI_TIMEOUT_S) -> None:
        import subprocess

        self.timeout_s = timeout_s
        self.deadline = time.monotonic() + timeout_s
        self.error: str | None = None
        self.calls: list[Any] = []
        exe = which("nvidia-smi")
        if exe is None:
            self.error = NO_NVIDIA_SMI
            return
        fmt = "--format=csv,noheader,nounits"
        try:
            for query in (f"--query-gpu={GPU_QUERY}", f"--query-compute-apps={APP_QUERY}"):
                self.calls.append(subprocess.Popen(
                    [exe, query, fmt], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT))
        except OSError as exc:
            self.error = f"nvidia-smi did not answer: {exc}"
            self._end()

    def _answer(self, call: Any) -> tuple[str, str | None]:
        """(output, error or None) of one query, waited for until the deadline."""
        import subprocess

        try:
            raw, _ = call.communicate(timeout=max(0.0, self.deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            self._end()
            return "", f"nvidia-smi did not answer in {self.timeout_s:g} s"
        out = raw.decode(errors="replace")
        if call.returncode != 0:
            first = (out.strip().splitlines() or [f"exit status {call.returncode}"])[0]
            return out, f"nvidia-smi failed: {first}"
        return out, None

    def _end(self) -> None:
        """Every query still running killed, and reaped."""
        for call in self.calls:
            if call.returncode is None:
                call.kill()
                call.wait()
            if call.stdout is not None:
                call.stdout.close()

    def result(self) -> tuple[list[dict[str, Any]], list[dict[str, Any]], str | None]:
        """(GPUs, compute apps, error or None): the GPUs' failure is the error, and then no
        compute app is read; an error of the compute apps keeps the GPUs."""
        if self.error is not None:
            return [], [], self.error
        gpu_call, app_call = self.calls
        out, error = self._answer(gpu_call)
        if error is not None:
            self._end()
            return [], [], "nvidia-smi lists no GPUs" if "No devices" in out else error
        apps_out, apps_error = self._answer(app_call)
        return parse_gpu_lines(out), [] if apps_error else parse_app_lines(apps_out), apps_error


def query_gpus() -> tuple[list[dict[str, Any]], list[dict[str, Any]], str | None]:
    """(GPUs, compute apps, error or None), nvidia-smi's two queries run side by side."""
    return LabNvsmiReading().result()


def describe_holder(pid: int) -> dict[str, Any] | None:
    """Who a GPU's process is: uid, user, command, since, process group (None: gone)."""
    found = proc_stat(pid)
    if found is None or found[0] in ("Z", "X"):
        return None
    uid = proc_uid(pid)
    run, task = proc_tags(pid)  # only readable for our own processes
    command = cmdline(pid)
    return {"pid": pid, "uid": uid, "user": user_name(uid), "pgid": found[1],
            "cmdline": None if command is None else command[:200], "since": process_since(pid),
            "tfctl_run_id": run, "tfctl_task": task}


# ---------------------------------------------------------------- the idle sampler

def next_low(prev: dict[str, Any] | None, t: float, gpus: list[dict[str, Any]],
             apps: list[dict[str, Any]], sample_s: float) -> dict[str, Any]:
    """The sampler's state after a sample at `t`: per GPU index, its utilization and, per pid
    on it, since when every sample has seen that pid there under IDLE_UTIL_PCT; pure."""
    prev = prev or {}
    joined = bool(prev) and t - float(prev.get("t") or 0) <= GAP_SAMPLES * sample_s + 1
    by_uuid = {g["uuid"]: g["index"] for g in gpus}
    pids: dict[int, list[int]] = {}
    for app in apps:
        index = by_uuid.get(app["gpu_uuid"])
        if index is not None:
            pids.setdefault(index, []).append(app["pid"])
    state: dict[str, Any] = {"t": t, "sample_s": sample_s, "gpus": {},
                             "started": prev.get("started") if joined else t}
    for gpu in gpus:
        key, util = str(gpu["index"]), gpu["utilization_pct"]
        before = ((prev.get("gpus") or {}).get(key) or {}).get("low") or {} if joined else {}
        low = {}
        if util is not None and util < IDLE_UTIL_PCT:
            for pid in pids.get(gpu["index"], []):
                low[str(pid)] = before.get(str(pid), t)
        state["gpus"][key] = {"util": util, "low": low}
    return state


def _lab_folder(workdir: str) -> str:
    folder = os.path.join(workdir, LAB_FOLDER)
    os.makedirs(folder, exist_ok=True)
    return folder


def sample_forever(folder: str, first: tuple[float, list[dict[str, Any]],
                                             list[dict[str, Any]]] | None = None) -> int:
    """The sampler's body (detached): sample while someone looks, under an exclusive lock.
    `first`: the reading (time, GPUs, compute apps) of the `lab` request that started it, its
    first sample (nvidia-smi is not asked again for the same moment)."""
    import fcntl
    import hashlib

    try:
        with open("/proc/self/comm", "w") as comm:
            comm.write("tfctl-lab-idle")
    except OSError:
        pass  # only cosmetic
    lock = open(os.path.join(folder, "sampler.lock"), "a")  # noqa: SIM115  # held until exit
    try:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return 0  # another sampler of ours runs
    path = os.path.join(folder, "sampler.json")
    seen = SeenLedger(hashlib.sha1(folder.encode()).hexdigest()[:8])  # ledger.py
    while True:
        wanted = read_json(os.path.join(folder, "wanted.json")) or {}
        if time.time() > float(wanted.get("until") or 0):
            return 0
        sample_s = max(0.5, float(wanted.get("sample_s") or SAMPLE_S))
        error: str | None = None
        if first is not None:
            (t, gpus, apps), first = first, None
        else:
            gpus, apps, error = query_gpus()
            t = time.time()
        if error is None:
            write_json(path, next_low(read_json(path), t, gpus, apps, sample_s))
            with contextlib.suppress(OSError, ValueError, KeyError, TypeError):  # never ends it
                seen.note(t, gpus, apps, ledger_others(apps, read_claims()[0]))
        time.sleep(sample_s)


def ensure_sampler(folder: str, sample_s: float, linger_s: float,
                   first: tuple[float, list[dict[str, Any]], list[dict[str, Any]]] | None = None
                   ) -> None:
    """Keep the sampler wanted for `linger_s` more seconds, and started if none runs (with
    `first`, the reading just taken, as its first sample)."""
    import fcntl

    write_json(os.path.join(folder, "wanted.json"), {"until": time.time() + linger_s,
                                                     "sample_s": sample_s})
    with open(os.path.join(folder, "sampler.lock"), "a") as lock:
        try:
            fcntl.flock(lock.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return  # one runs
        fcntl.flock(lock.fileno(), fcntl.LOCK_UN)
    fork_detached(lambda: sample_forever(folder, first))


def idle_report(folder: str, now_s: float) -> dict[str, Any]:
    """What the sampler measured, if its last sample is recent: per GPU, pid → low since."""
    state = read_json(os.path.join(folder, "sampler.json")) or {}
    sample_s = float(state.get("sample_s") or SAMPLE_S)
    fresh = bool(state) and now_s - float(state.get("t") or 0) <= GAP_SAMPLES * sample_s + 1
    if not fresh:
        return {"sampled_at": None, "watching_since": None, "sample_s": sample_s,
                "low_since": {}}
    return {"sampled_at": state["t"], "watching_since": state.get("started"),
            "sample_s": sample_s,
            "low_since": {k: v.get("low") or {} for k, v in (state.get("gpus") or {}).items()}}


# ---------------------------------------------------------------- the operations

def _me() -> HostUser:
    return HostUser(os.getuid(), user_name(os.getuid()))


def _claims_answer(me: HostUser) -> ClaimsAnswer:
    """The claims on this host, ours that are stale or expired removed first."""
    claims, warnings = read_claims()
    removed = sweep_own(claims)
    return ClaimsAnswer(me, tuple(c for c in claims if c["file"] not in removed),
                        tuple(warnings), tuple(removed), time.time())


def _gpu_state(found: ClaimsAnswer, gpus: list[dict[str, Any]], apps: list[dict[str, Any]],
               error: str | None, **more: Any) -> GpuState:
    """The claims `found`, nvidia-smi's GPUs and compute apps and who those processes are, with
    `more` of `GpuState`'s fields."""
    procs = {str(p): describe_holder(p) for p in sorted({a["pid"] for a in apps})}
    return GpuState(found.me, found.claims, found.warnings, found.removed, found.now,
                    gpus=tuple(gpus), apps=tuple(apps), error=error, procs=procs, **more)


def gpu_state_now(**more: Any) -> GpuState:
    """The claims (`_claims_answer`, read while nvidia-smi runs), nvidia-smi's GPUs and compute
    apps and who those processes are (ops `lab`, `gpu_state`), with `more` of `GpuState`'s
    fields."""
    reading = LabNvsmiReading()
    found = _claims_answer(_me())
    return _gpu_state(found, *reading.result(), **more)


def op_lab(req: LabRequest) -> GpuState:
    """Everything `tfctl lab` shows of this host, in one request: what `gpu_state` answers, the
    host's name and the idle sampler's measure (the sampler kept going while GPUs answer)."""
    reading = LabNvsmiReading()
    found = _claims_answer(_me())
    folder = _lab_folder(expand(str(req.workdir)))
    gpus, apps, error = reading.result()
    if not error and gpus:
        ensure_sampler(folder, float(req.sample_s or SAMPLE_S), float(req.linger_s or LINGER_S),
                       (time.time(), gpus, apps))
    week, ledger_warnings = ledger_week_held(time.time())
    return _gpu_state(found, gpus, apps, error, hostname=os.uname().nodename,
                      idle=idle_report(folder, time.time()), week_held=week,
                      ledger_warnings=tuple(ledger_warnings))


def op_lab_policy(req: LabPolicyRequest) -> LabPolicy:
    """The lab policy in force on this host, or why its file is ignored (agent/policy.py)."""
    return LabPolicy.from_wire(read_policy())


def op_claims(req: ClaimsRequest) -> ClaimsAnswer:
    """The claims on this host (ours that are stale or expired removed), for `reserve --list`
    and the busy-GPU check."""
    return _claims_answer(_me())


def _gpu_list(gpus: Any) -> list[int]:
    if not isinstance(gpus, (list, tuple)) or not all(isinstance(g, int) and g >= 0
                                                      for g in gpus):
        raise AgentError("bad_request", "gpus must be a list of GPU indices")
    return sorted(set(gpus))


def op_reserve(req: ReserveRequest) -> ReserveAnswer:
    """Reserve GPUs (one claim each) until `until_s`; refused where another user's reservation
    stands, unless `force`. Our own earlier reservation of a GPU is replaced."""
    gpus, until = _gpu_list(req.gpus), float(req.until_s or 0)  # REQUIRED: given
    note = req.note
    found = _claims_answer(_me())
    me = os.getuid()
    theirs = [c for c in found.claims if c["uid"] != me and c["state"] == "live"]
    taken = [(g, c) for g in gpus for c in theirs
             if c["kind"] == "reservation" and g in c["gpus"]]
    if taken and not req.force:
        g, c = taken[0]
        said = f" ({c['note']})" if c.get("note") else ""
        raise AgentError("reserved", f"GPU {g} is reserved by {c['user']} until "
                         f"{_reserved_until(c['until'])}{said}",
                         user=c["user"], until=c["until"], gpu=g)
    now_s = time.time()
    for g in gpus:
        record = {"run_id": None, "job": None, "host": req.host, "since": now_s,
                  "until": until, "note": None if note is None else str(note)[:200],
                  "gpus": [g], "tasks": []}
        parse_claim(dict(record, format="tfctl-claim/1", kind="reservation"))
        try:
            write_claim("reservation", f"gpu{g}", record)
        except (OSError, ValueError) as exc:
            raise AgentError("claims", f"cannot reserve GPU {g}: {exc}") from exc
    held = [{"gpu": g, "user": c["user"], "run_id": c["run_id"], "kind": c["kind"],
             "until": c["until"]} for g in gpus for c in theirs if g in c["gpus"]]
    return ReserveAnswer(tuple(gpus), until, note, tuple(held), found.me, found.warnings)


def op_release(req: ReleaseRequest) -> ReleaseAnswer:
    """Remove our reservations of `gpus`; name any another user holds (not ours to remove)."""
    gpus = _gpu_list(req.gpus)
    me = _me()
    found = _claims_answer(me)
    released, missing, others = [], [], []
    for g in gpus:
        name = claim_file_name(str(me.user), "reservation", f"gpu{g}")
        if remove_claim(name):
            released.append(g)
            continue
        missing.append(g)
        others += [{"gpu": g, "user": c["user"], "until": c["until"]} for c in found.claims
                   if c["kind"] == "reservation" and g in c["gpus"] and c["uid"] != me.uid]
    return ReleaseAnswer(tuple(released), tuple(missing), tuple(others), me, found.warnings)


def _reserved_until(wall_s: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M %Z", time.localtime(wall_s))
