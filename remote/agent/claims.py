"""Claims: what each user's tfctl holds or reserves on this host, in a folder every user reads.

Part of the agent program (`__init__.py`): stdlib only, Python >= 3.8, Linux, no tfctl imports.

A lab's box is shared by several Unix users, and nvidia-smi names only pids: a run of another
user is, from /proc alone, a pid whose environment we may not read. So each run leaves a claim
on its hosts, and a reservation is a claim with an end time and no process. The format is in
docs/claims.md; in short, one JSON file per claim in the claims folder (`claims_dir()`:
`$TFCTL_CLAIMS_DIR`, else /tmp/tfctl-claims), named `<user>.<kind>.<id>.json`.

The folder follows /tmp's rules: mode 1777 (anyone writes, the sticky bit lets only a file's
owner, the folder's owner and root remove or replace a file), created by whoever comes first.
Claims are other users' data, so a reader trusts nothing in them it can check otherwise:
- the user is the file's owner (its uid, from the descriptor opened with O_NOFOLLOW), never the
  `user` written inside; a file named after another user than its owner is skipped;
- a symbolic link is never followed, nor anything but a regular file read; a file over
  MAX_CLAIM_BYTES, bad JSON or a record of the wrong shape is skipped;
- no user's files hide another's (`read_folder`): the names are listed and each file's owner
  taken from its lstat before anything is read, a file counts against its owner whatever its
  name says, and at most MAX_FILES_PER_OWNER files of each owner are read (its names shaped as
  tfctl's own first); what was skipped is one warning per owner, with a count per reason;
- a run claim is `live` only while one of its recorded processes (pid and start time, owned by
  the claim's uid, in this boot) runs; otherwise it is `stale`, shown so and never obeyed; a
  reservation past its end is `expired`, and its owner's next command removes it.
Only the owner removes a claim: `remove_claim` checks the file's uid before unlinking (and the
sticky bit stops anyone else's unlink anyway).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import stat
from collections.abc import Callable
from typing import Any

from tfctl.remote.agent.boot import boot_id
from tfctl.remote.agent.jsonfile import read_json
from tfctl.remote.agent.proc import proc_stat, proc_uid, same_process, start_ticks, user_name
from tfctl.remote.agent.rundir import task_file
from tfctl.remote.agent.state import KEEPER_PID
from tfctl.remote.agent.wire import json_dumps, json_loads

CLAIMS_DIR_VAR = "TFCTL_CLAIMS_DIR"
DEFAULT_CLAIMS_DIR = "/tmp/tfctl-claims"
CLAIM_FORMAT = "tfctl-claim/1"
MAX_CLAIM_BYTES = 64 * 1024
MAX_FILES_PER_OWNER = 128
"""Files of one owner read in one look: far more than the runs and reservations one user holds
on one host. Each owner's files are bounded on their own, so a user's flood costs that user's
own files and no one else's."""
MAX_LISTED = 65536
"""Entries of a folder looked at in one look (a stat each, nothing read)."""
MAX_TEXT = 200
KINDS = ("run", "reservation")
_ID_CHARACTERS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-")
"""What an id keeps in a claim's file name; any other character is `_`."""


def claims_dir() -> str:
    return os.environ.get(CLAIMS_DIR_VAR) or DEFAULT_CLAIMS_DIR


def claim_file_name(user: str, kind: str, ident: str) -> str:
    """`alice.run.20261125-101500-ab12.json`: the user first, so a file named after one user
    and owned by another is seen for what it is."""
    safe = "".join(c if c in _ID_CHARACTERS else "_" for c in ident[:120])
    return f"{user}.{kind}.{safe}.json"


def folder_problem(folder: str) -> str | None:
    """Why `folder` cannot hold claims safely (not a real directory, not sticky and writable
    by all), or None."""
    try:
        st = os.lstat(folder)
    except FileNotFoundError:
        return "it does not exist"
    except OSError as exc:
        return exc.strerror or str(exc)
    if stat.S_ISLNK(st.st_mode):
        return "it is a symbolic link (not followed)"
    if not stat.S_ISDIR(st.st_mode):
        return "it is not a directory"
    if (st.st_mode & 0o1777) != 0o1777:
        return f"its mode is {stat.S_IMODE(st.st_mode):o}, not 1777 (sticky, writable by all)"
    return None


def ensure_folder(folder: str) -> str | None:
    """Make the claims folder (mode 1777) unless it exists; why it is unusable, or None."""
    try:
        os.mkdir(folder, 0o700)  # private until its mode is set (no window for another user)
        os.chmod(folder, 0o1777)
    except FileExistsError:
        pass
    except OSError as exc:
        return f"cannot make the claims folder {folder}: {exc.strerror or exc}"
    problem = folder_problem(folder)
    return None if problem is None else f"claims folder {folder} is unusable: {problem}"


# ---------------------------------------------------------------- reading other users' files

def _text(value: Any, limit: int = MAX_TEXT) -> str | None:
    return None if value is None else str(value)[:limit]


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) \
        else None


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _gpus(value: Any) -> list[Any]:
    """GPU tokens: host indices (int) or UUID strings, at most 64 of them."""
    if not isinstance(value, list):
        raise ValueError("gpus is not a list")
    out: list[Any] = []
    for token in value[:64]:
        if isinstance(token, int) and not isinstance(token, bool) and token >= 0:
            out.append(token)
        elif isinstance(token, str) and token.strip():
            out.append(int(token) if token.isdigit() else token[:64])
        else:
            raise ValueError(f"bad GPU {token!r}")
    return out


def _task(value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ValueError("a task is not an object")
    return {"name": _text(value.get("name"), 64), "gpus": _gpus(value.get("gpus") or []),
            "pid": _int(value.get("pid")), "pgid": _int(value.get("pgid")),
            "start_ticks": _int(value.get("start_ticks")),
            "supervisor_pid": _int(value.get("supervisor_pid")),
            "supervisor_start_ticks": _int(value.get("supervisor_start_ticks"))}


def _idle(value: Any) -> dict[str, Any] | None:
    """A run's idle warning under the lab policy (idlewatch.py): since when, stopped when."""
    if not isinstance(value, dict):
        return None
    since, stop_at = _number(value.get("since")), _number(value.get("stop_at"))
    return None if since is None or stop_at is None else {"since": since, "stop_at": stop_at}


def parse_claim(raw: Any) -> dict[str, Any]:
    """The checked fields of a claim's JSON (ValueError for anything not a claim); pure.
    The owner is not among them: it comes from the file."""
    if not isinstance(raw, dict) or raw.get("format") != CLAIM_FORMAT:
        raise ValueError(f"not a {CLAIM_FORMAT} record")
    kind = raw.get("kind")
    if kind not in KINDS:
        raise ValueError(f"unknown kind {kind!r}")
    tasks = raw.get("tasks") or []
    if not isinstance(tasks, list) or len(tasks) > 256:
        raise ValueError("tasks is not a list")
    claim = {"kind": kind, "run_id": _text(raw.get("run_id"), 120), "job": _text(raw.get("job")),
             "host": _text(raw.get("host"), 120), "since": _number(raw.get("since")),
             "until": _number(raw.get("until")), "note": _text(raw.get("note")),
             "gpus": _gpus(raw.get("gpus") or []), "tasks": [_task(t) for t in tasks],
             "watcher_pid": _int(raw.get("watcher_pid")),
             "watcher_start_ticks": _int(raw.get("watcher_start_ticks")),
             "boot_id": _text(raw.get("boot_id"), 64), "idle": _idle(raw.get("idle")),
             "session": _text(raw.get("session"), 16) or ""}
    if kind == "reservation" and claim["until"] is None:
        raise ValueError("a reservation without an end")
    return claim


class Owned:
    """A file of the shared folder read without trusting it: its bytes, and its owner as the
    opened file's uid says (never its content)."""

    def __init__(self, data: bytes, uid: int, user: str) -> None:
        self.data, self.uid, self.user = data, uid, user


def read_owned(path: str, named_user: str, max_bytes: int) -> Owned | str | None:
    """The file at `path` as `Owned`, why it was skipped (a few words), or None when it is
    gone. Another user's data: a link is never followed (lstat, then O_NOFOLLOW), only a
    regular file of at most `max_bytes` is read, and its owner must be the user its name says
    (`named_user`), so nobody leaves a file under another's name."""
    try:
        st = os.lstat(path)
    except OSError:
        return None  # removed meanwhile
    if stat.S_ISLNK(st.st_mode):
        return "a symbolic link (not followed)"
    if not stat.S_ISREG(st.st_mode):
        return "not a regular file"
    if st.st_size > max_bytes:
        return f"over {max_bytes} bytes"
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        return exc.strerror or str(exc)
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode):
            return "not a regular file"
        data = f.read(max_bytes + 1)
    owner = user_name(st.st_uid)
    if owner != named_user:
        return f"named after user {named_user} but owned by {owner}"
    if len(data) > max_bytes:
        return f"over {max_bytes} bytes"
    return Owned(data, st.st_uid, owner)


class _Skipped:
    """One owner's files a look skipped: how many for each reason, and the first one's name."""

    def __init__(self) -> None:
        self.count: dict[str, int] = {}
        self.first: tuple[str, str] | None = None

    def add(self, name: str, why: str) -> None:
        self.count[why] = self.count.get(why, 0) + 1
        self.first = self.first or (name, why)

    def words(self, label: str, folder: str, owner: str) -> str:
        total = sum(self.count.values())
        assert self.first is not None
        if total == 1:
            return f"{label} {folder}: skipped {self.first[0]} of user {owner}: {self.first[1]}"
        ranked = sorted(self.count.items(), key=lambda kv: (-kv[1], kv[0]))
        said = "; ".join(f"{n} {why}" for why, n in ranked[:5])
        more = f"; {len(ranked) - 5} other reasons" if len(ranked) > 5 else ""
        return (f"{label} {folder}: skipped {total} files of user {owner} ({said}{more}; the "
                f"first: {self.first[0]})")


_TFCTL_IDS = (r"\.(?:run\.\d{8}-\d{6}-[0-9a-f]{4}|reservation\.gpu[\w-]+|ticket\.[\w-]+)"
              r"\.json$")
"""The names tfctl itself writes (`claim_file_name`, the tickets' `ticket_file_name`): read
first among an owner's files."""


def read_folder(folder: str, label: str, kinds: tuple[str, ...], max_bytes: int,
                parse: Callable[[Any, str], dict[str, Any]],
                per_owner: int = MAX_FILES_PER_OWNER,
                wanted: Callable[[str, os.stat_result], bool] | None = None
                ) -> tuple[list[dict[str, Any]], list[str]]:
    """Every record of the `<user>.<kind>.<id>.json` files of `folder` (`kind` one of `kinds`):
    `parse(its JSON, kind)` with `file`, `uid` and `user` added; and the warnings, one per owner
    whose files were skipped, or one for a folder that is not read (`label`: "claims folder").

    Other users' data. No user's files hide another's: the names are listed and each file's
    owner is its lstat's uid before anything is opened, so a file counts against its owner
    whatever its name says; a link, anything but a regular file, a file over `max_bytes` or one
    named after another user than its owner is skipped without being opened; of each owner at
    most `per_owner` files are read, the names tfctl writes first, so neither another user's
    flood nor one's own junk crowds out anybody's claims, the reader's own included.
    `wanted(name, lstat)`: False for a file the caller does not need (the ledger's files older
    than its window), which is then neither read nor counted."""
    problem = folder_problem(folder)
    if problem == "it does not exist":
        return [], []
    if problem is not None:
        return [], [f"{label} {folder} is not read: {problem}"]
    names: list[tuple[str, os.stat_result]] = []
    try:
        with os.scandir(folder) as entries:
            for n, entry in enumerate(entries):
                if n >= MAX_LISTED:
                    break
                parts = entry.name.split(".")
                if entry.name.startswith(".") or not entry.name.endswith(".json") \
                        or len(parts) < 4 or parts[1] not in kinds:
                    continue  # a temporary file being written, or not ours
                with contextlib.suppress(OSError):  # removed meanwhile
                    st = entry.stat(follow_symlinks=False)
                    if wanted is None or wanted(entry.name, st):
                        names.append((entry.name, st))
    except OSError as exc:
        return [], [f"{label} {folder} is not read: {exc.strerror or exc}"]
    owners: dict[int, str] = {}
    skipped: dict[str, _Skipped] = {}
    chosen: dict[int, list[str]] = {}
    for name, st in sorted(names):
        owner = owners.setdefault(st.st_uid, user_name(st.st_uid) or str(st.st_uid))
        why = None
        if stat.S_ISLNK(st.st_mode):
            why = "a symbolic link (not followed)"
        elif not stat.S_ISREG(st.st_mode):
            why = "not a regular file"
        elif name.split(".")[0] != owner:
            why = f"named after user {name.split('.')[0]}"
        elif st.st_size > max_bytes:
            why = f"over {max_bytes} bytes"
        if why is not None:
            skipped.setdefault(owner, _Skipped()).add(name, why)
        else:
            chosen.setdefault(st.st_uid, []).append(name)
    records = []
    for uid, own in chosen.items():
        own.sort(key=lambda name: (re.search(_TFCTL_IDS, name) is None, name))
        for name in own[:per_owner]:
            record, why = _read_record(folder, name, max_bytes, parse)
            if record is not None:
                records.append(record)
            elif why is not None:
                skipped.setdefault(owners[uid], _Skipped()).add(name, why)
        for name in own[per_owner:]:
            skipped.setdefault(owners[uid], _Skipped()).add(
                name, f"not read (at most {per_owner} files of one user are read)")
    warnings = [skipped[owner].words(label, folder, owner) for owner in sorted(skipped)]
    return records, warnings


def _read_record(folder: str, name: str, max_bytes: int,
                 parse: Callable[[Any, str], dict[str, Any]]
                 ) -> tuple[dict[str, Any] | None, str | None]:
    """(record, None), (None, why it was skipped), or (None, None) for a file gone meanwhile."""
    kind = name.split(".")[1]
    found = read_owned(os.path.join(folder, name), name.split(".")[0], max_bytes)
    if found is None or isinstance(found, str):
        return None, found
    try:
        record = parse(json.loads(found.data.decode("utf-8")), kind)
    except UnicodeDecodeError:
        return None, "not UTF-8"
    except RecursionError:
        return None, "nested too deep"
    except json.JSONDecodeError:
        return None, "not JSON"
    except ValueError as exc:
        return None, str(exc)[:120] or "not a record"
    record.update(file=name, uid=found.uid, user=found.user)
    return record, None


def _claim_of(raw: Any, kind: str) -> dict[str, Any]:
    claim = parse_claim(raw)
    if claim["kind"] != kind:
        raise ValueError(f"its name says {kind}, its record {claim['kind']}")
    return claim


def claim_state(claim: dict[str, Any], now_s: float) -> str:
    """`live`, `stale` (a run whose processes are all gone, or of another boot) or `expired`
    (a reservation past its end)."""
    if claim["kind"] == "reservation":
        return "expired" if (claim["until"] or 0) <= now_s else "live"
    if claim.get("boot_id") and boot_id() and claim["boot_id"] != boot_id():
        return "stale"
    recorded = [(claim.get("watcher_pid"), claim.get("watcher_start_ticks"))]
    for task in claim["tasks"]:
        recorded += [(task["pid"], task["start_ticks"]),
                     (task["supervisor_pid"], task["supervisor_start_ticks"])]
    for pid, ticks in recorded:
        if pid and same_process(pid, ticks) and proc_uid(pid) == claim["uid"]:
            return "live"
    return "stale"


def read_claims(folder: str | None = None, now_s: float | None = None
                ) -> tuple[list[dict[str, Any]], list[str]]:
    """Every claim in the folder with its `state`; one warning per owner whose files were
    skipped (`read_folder`)."""
    import time

    now_s = time.time() if now_s is None else now_s
    claims, warnings = read_folder(folder or claims_dir(), "claims folder", KINDS,
                                   MAX_CLAIM_BYTES, _claim_of)
    for claim in claims:
        claim["state"] = claim_state(claim, now_s)
    claims.sort(key=lambda c: c["file"])
    return claims, warnings


# ---------------------------------------------------------------- writing and removing our own

def write_claim(kind: str, ident: str, record: dict[str, Any],
                folder: str | None = None) -> str:
    """Write (or replace) our claim atomically; its path. OSError/ValueError when it cannot."""
    folder = folder or claims_dir()
    problem = ensure_folder(folder)
    if problem:
        raise ValueError(problem)
    me = user_name(os.getuid()) or str(os.getuid())
    body = dict(record, format=CLAIM_FORMAT, kind=kind, user=me)
    parse_claim(json_loads(json_dumps(body)))  # what we write, others must be able to read
    path = os.path.join(folder, claim_file_name(me, kind, ident))
    write_own_file(path, me, kind, json_dumps(body, sort_keys=True))
    return path


def write_own_file(path: str, me: str, kind: str, text: str) -> None:
    """`text` into our file `path` in a shared sticky folder (claims, the ledger), atomically:
    written to a temporary file of ours (never following a link), readable by every user, then
    renamed over `path`; the temporary file goes if anything fails."""
    tmp = os.path.join(os.path.dirname(path), f".{me}.{os.getpid()}.{kind}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                 0o644)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)  # the sticky bit refuses replacing another user's file
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def remove_claim(name: str, folder: str | None = None) -> bool:
    """Remove our claim file `name`; False when it is gone or not ours (left untouched)."""
    folder = folder or claims_dir()
    if "/" in name or name.startswith("."):
        return False
    path = os.path.join(folder, name)
    try:
        st = os.lstat(path)
    except OSError:
        return False
    if st.st_uid != os.getuid():
        return False
    try:
        os.unlink(path)
    except OSError:
        return False
    return True


def sweep_own(claims: list[dict[str, Any]], folder: str | None = None) -> list[str]:
    """Remove our claims that are stale or expired; the names removed."""
    return [c["file"] for c in claims if c["uid"] == os.getuid()
            and c["state"] in ("stale", "expired") and remove_claim(c["file"], folder)]


# ---------------------------------------------------------------- a run's claim

def mask_gpus(mask: Any) -> list[Any]:
    """CUDA_VISIBLE_DEVICES as GPU tokens, up to CUDA's first invalid entry."""
    out: list[Any] = []
    for token in (t.strip() for t in str(mask or "").split(",")):
        if token.isdigit():
            out.append(int(token))
        elif token.startswith(("GPU-", "MIG-")):
            out.append(token)
        else:
            break
    return out


def run_claim_record(run_dir: str, run_id: str, manifest: dict[str, Any],
                     keeper_pid: int | None = None) -> dict[str, Any]:
    """The claim of a run on this host, from its manifest and its tasks' pid records. The
    claim's `watcher_pid` is the run's keeper (keeper.py), which watches the run there: the
    field keeps its name, which other users' tfctl read."""
    import time

    tasks, gpus = [], []
    for task in manifest.get("tasks", []):
        rec = read_json(task_file(run_dir, task["name"], ".pid.json")) or {}
        env = task.get("env") or {}
        mask = env.get("CUDA_VISIBLE_DEVICES", task.get("cuda_visible_devices"))
        used = mask_gpus(mask)
        gpus += [g for g in used if g not in gpus]
        tasks.append({"name": task["name"], "gpus": used, "pid": rec.get("pid"),
                      "pgid": rec.get("pgid"), "start_ticks": rec.get("start_ticks"),
                      "supervisor_pid": rec.get("supervisor_pid"),
                      "supervisor_start_ticks": rec.get("supervisor_start_ticks")})
    keeper = read_json(os.path.join(run_dir, KEEPER_PID)) or {}
    if keeper_pid:  # just started: it may not have written its record yet
        keeper = {"pid": keeper_pid, "start_ticks": start_ticks(keeper_pid)}
    return {"run_id": run_id, "job": manifest.get("inventory"), "host": manifest.get("host"),
            "since": manifest.get("created_at") or time.time(), "until": None, "note": None,
            "gpus": gpus, "tasks": tasks, "watcher_pid": keeper.get("pid"),
            "watcher_start_ticks": keeper.get("start_ticks"), "boot_id": boot_id(),
            "idle": _idle(read_json(os.path.join(run_dir, "idle.json"))),
            "session": manifest.get("session") or ""}


def claim_run(run_dir: str, run_id: str, manifest: dict[str, Any],
              keeper_pid: int | None = None) -> str | None:
    """Leave (or refresh) the run's claim on this host; a warning when it cannot, else None.
    A claim is a courtesy to the other users: a run never fails for want of one."""
    try:
        write_claim("run", run_id, run_claim_record(run_dir, run_id, manifest, keeper_pid))
    except (OSError, ValueError) as exc:
        return f"no claim left for run {run_id}: {exc}"
    return None


def release_run(run_id: str) -> bool:
    me = user_name(os.getuid()) or str(os.getuid())
    return remove_claim(claim_file_name(me, "run", run_id))


def process_since(pid: int) -> float | None:
    """When the process started (epoch seconds), from its start ticks and the boot time."""
    found = proc_stat(pid)
    if found is None:
        return None
    try:
        with open("/proc/stat") as f:
            btime = next(int(line.split()[1]) for line in f if line.startswith("btime "))
    except (OSError, StopIteration, ValueError):
        return None
    return btime + found[2] / os.sysconf("SC_CLK_TCK")
