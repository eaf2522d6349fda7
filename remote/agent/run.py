"""The agent's run directory and task supervisor: how a task is started, watched and recorded.

Part of the agent program (see `agent.py`): stdlib only, Python >= 3.8, Linux, no tfctl imports.

Layout, `<workdir>/.tfctl/runs/<run_id>/`: `manifest.json`; per task (":" in its name becomes
"-"): `<task>.log` (stdout+stderr, appended), `<task>.pid.json` ({pid, pgid, supervisor_pid,
started_at, restarts, start ticks, boot_id: the host's boot it started in, see `boot.py`}),
`<task>.exit.json` once it ended for good ({exit_code, signal, ended_at}; written through
`<task>.exit.slot`, room kept for it at the start, when the disk is full), `<task>.stopped` when
`tfctl down` stopped it; `finished.json` when the job ended.

Each task runs under a detached supervisor (double fork, `setsid`: it leads the task's session and
process group, holds no descriptor of the SSH session, so SSH returns at once). The supervisor
records the task's pid, waits for it, restarts it by policy, and records how it ended; it shrugs
off SIGTERM/SIGINT/SIGHUP so that a TERM to the whole group still leaves it alive to write the
exit record.

The task's stdout and stderr are a pipe the supervisor relays into `<task>.log` (`TaskLog`), so
that neither a full disk nor a log's size is the task's problem: at the manifest's
`log_max_bytes` the log is rotated (`<task>.log.1` keeps the part before, older output is
dropped), and output that finds no room is dropped, counted, and said in the log once there is
room again; the task's own writes never fail for it.
"""

from __future__ import annotations

import contextlib
import functools  # loaded anyway (json imports re, which imports it)
import json
import os
import signal
import sys
import time
from collections.abc import Callable
from typing import Any

from tfctl.remote.agent.boot import boot_id, from_other_boot
from tfctl.remote.agent.proc import proc_stat, signal_name, start_ticks


class AgentError(Exception):
    """A failure with a one-sentence message for a person and a `kind` for the client."""

    def __init__(self, kind: str, message: str, **extra: Any) -> None:
        super().__init__(message)
        self.kind, self.message, self.extra = kind, message, extra


# ---------------------------------------------------------------- the run directory

def now() -> float:
    return round(time.time(), 3)


def runs_root(workdir: str) -> str:
    return os.path.join(workdir, ".tfctl", "runs")


def run_dir_of(workdir: str, run_id: str) -> str:
    run_id = str(run_id)
    if not run_id or run_id.startswith(".") or "/" in run_id or "\0" in run_id:
        raise AgentError("bad_request", f"invalid run id {run_id!r}")
    return os.path.join(runs_root(workdir), run_id)


def task_file(run_dir: str, task: str, suffix: str) -> str:
    return os.path.join(run_dir, task.replace(":", "-").replace("/", "-") + suffix)


def write_json(path: str, value: Any) -> None:
    """Write atomically (temp file + rename): readers never see half a record, and a write
    that fails (no room) leaves no temp file behind."""
    tmp = f"{path}.{os.getpid()}.tmp"
    try:
        with open(tmp, "w") as f:
            json.dump(value, f, indent=1, sort_keys=True)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def write_json_when_room(path: str, value: Any, every_s: float = 1.0,
                         slot: str | None = None) -> None:
    """`write_json`, where the disk has no room for it (ENOSPC, EDQUOT) written into `slot`
    (a file `reserve_slot` filled while there was room, rewritten in place: no new blocks)
    renamed to `path`, else tried again every `every_s`: a task's end must reach its record,
    which status and the job's end read."""
    import errno

    while True:
        try:
            write_json(path, value)
            if slot is not None:
                with contextlib.suppress(OSError):
                    os.unlink(slot)
            return
        except OSError as exc:
            if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
                raise
        data = json.dumps(value, sort_keys=True).encode()
        if slot is not None and len(data) <= SLOT_BYTES:
            try:
                fd = os.open(slot, os.O_WRONLY)
                try:
                    os.pwrite(fd, data.ljust(SLOT_BYTES), 0)  # JSON allows trailing blanks
                finally:
                    os.close(fd)
                os.replace(slot, path)
                return
            except OSError:
                slot = None  # no slot after all: wait for room
        time.sleep(every_s)


SLOT_BYTES = 4096


def reserve_slot(path: str) -> str | None:
    """A file of SLOT_BYTES blanks at `path`, its blocks taken now; None without room."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    except OSError:
        return None
    try:
        os.pwrite(fd, b" " * SLOT_BYTES, 0)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(path)
        return None
    finally:
        os.close(fd)
    return path


def read_json(path: str) -> Any:
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def load_manifest(run_dir: str) -> dict[str, Any]:
    manifest = read_json(os.path.join(run_dir, "manifest.json"))
    if not isinstance(manifest, dict):
        raise AgentError("no_run", f"no tfctl run at {run_dir} (manifest.json missing)",
                         run_dir=run_dir)
    return manifest


def manifest_tasks(manifest: dict[str, Any], names: list[str] | None) -> list[dict[str, Any]]:
    """The manifest's task records, all of them or those named (unknown names are an error)."""
    by_name = {t["name"]: t for t in manifest.get("tasks", [])}
    if names is None:
        return list(by_name.values())
    unknown = [n for n in names if n not in by_name]
    if unknown:
        raise AgentError("unknown_task", f"run {manifest.get('run_id')} has no task "
                         f"{', '.join(unknown)} on this host", tasks=unknown)
    return [by_name[n] for n in names]


def log_tail(path: str, lines: int, limit_bytes: int = 1 << 20) -> list[str]:
    """The last `lines` lines of a log, reading backwards from its end (at most `limit_bytes`)."""
    if lines <= 0:
        return []
    data = b""
    try:
        with open(path, "rb") as f:
            pos = f.seek(0, os.SEEK_END)
            while pos > 0 and data.count(b"\n") <= lines and len(data) < limit_bytes:
                step = min(8192, pos)
                pos -= step
                f.seek(pos)
                data = f.read(step) + data
    except OSError:
        return []
    return data.decode("utf-8", "replace").splitlines()[-lines:]


def read_log_from(path: str, offset: int, max_bytes: int) -> dict[str, Any]:
    """Bytes appended since `offset` (never splitting a UTF-8 character) and the next offset."""
    try:
        size = os.path.getsize(path)
    except OSError:
        size = 0
    reset = offset > size  # the file is shorter than what we read: start over
    if reset:
        offset = 0
    data = b""
    if size > offset:
        with open(path, "rb") as f:
            f.seek(offset)
            data = f.read(max(1, max_bytes))
    keep = _utf8_complete(data)
    return {"data": data[:keep].decode("utf-8", "replace"), "offset": offset + keep,
            "size": size, "reset": reset}


def _utf8_complete(data: bytes) -> int:
    """Length of `data` without a trailing incomplete UTF-8 sequence (a writer mid-character)."""
    for back in range(1, min(4, len(data)) + 1):
        byte = data[-back]
        if byte & 0xC0 != 0x80:  # the last lead (or ASCII) byte
            need = 1 if byte < 0x80 else 2 if byte >> 5 == 6 else 3 if byte >> 4 == 14 else 4
            return len(data) - back if need > back and len(data) > back else len(data)
    return len(data)


# ---------------------------------------------------------------- detaching and supervising

def detach_stdio(out_path: str, keep: tuple[int, ...] = ()) -> None:
    """stdin from /dev/null, stdout+stderr appended to `out_path`, every other fd but `keep` closed.

    Nothing of the SSH session may stay open in a detached process, or SSH waits for it.
    """
    null = os.open(os.devnull, os.O_RDONLY)
    out = os.open(out_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(null, 0)
    os.dup2(out, 1)
    os.dup2(out, 2)
    for fd in [int(n) for n in os.listdir("/proc/self/fd")]:
        if fd > 2 and fd not in keep:
            try:
                os.close(fd)
            except OSError:
                continue  # the descriptor of the listing itself, already closed


def fork_detached(body: Callable[[], int], out_path: str = os.devnull,
                  keep: tuple[int, ...] = ()) -> int:
    """Run `body()` in a grandchild leading its own session; return the grandchild's pid."""
    sys.stdout.flush()
    sys.stderr.flush()
    read_end, write_end = os.pipe()
    child = os.fork()
    if child == 0:
        code = 70
        try:
            os.close(read_end)
            grandchild = os.fork()
            if grandchild:
                os.write(write_end, str(grandchild).encode())
                code = 0
            else:
                os.setsid()
                os.chdir("/")
                detach_stdio(out_path, keep)
                code = body()
        except BaseException:
            import traceback

            traceback.print_exc()
        finally:
            os._exit(code)
    os.close(write_end)
    with os.fdopen(read_end) as pipe:
        pid = int(pipe.read() or 0)
    os.waitpid(child, 0)
    return pid


def exit_record(returncode: int) -> dict[str, Any]:
    if returncode < 0:
        return {"exit_code": None, "signal": signal_name(-returncode), "ended_at": now()}
    return {"exit_code": returncode, "signal": None, "ended_at": now()}


def _describe_exit(record: dict[str, Any]) -> str:
    return str(record["signal"] or record["exit_code"])


LOG_MAX_BYTES = 256 << 20  # a manifest without log_max_bytes (`job.log_max_mb`)
_task_log: list[TaskLog] = []
"""The supervisor's task log, once it relays one (its own lines go there too)."""


def _log(message: str) -> None:
    line = f"==> tfctl: {message}\n".encode()
    if _task_log:
        _task_log[0].write(line)
    else:
        os.write(1, line)


class TaskLog:
    """A task's output as its supervisor relays it: appended to `path`, rotated to `path.1` at
    `max_bytes`, and dropped (counted, said later) while the disk has no room for it."""

    def __init__(self, path: str, max_bytes: int) -> None:
        self.path, self.max_bytes = path, max(1, max_bytes)
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self.lost = 0

    def write(self, data: bytes) -> None:
        if self.lost:
            note = f"==> tfctl: {self.lost} bytes of output lost: no room on the disk\n"
            if self._put(note.encode()) < 0:
                self.lost += len(data)
                return
            self.lost = 0
        left = self._put(data)
        if left:
            self.lost += abs(left)

    def _put(self, data: bytes) -> int:
        """0 when `data` is written whole; else how many bytes were not (negative: none)."""
        view = memoryview(data)
        try:
            if os.fstat(self.fd).st_size + len(data) > self.max_bytes:
                self._rotate()
            while view:
                view = view[os.write(self.fd, view):]
        except OSError:
            return len(view) if len(view) < len(data) else -len(data)
        return 0

    def _rotate(self) -> None:
        """`path` becomes `path.1` (replacing the one before) and a new `path` is begun; the
        supervisor's own stdout and stderr follow it."""
        if os.fstat(self.fd).st_size == 0:
            return
        os.replace(self.path, self.path + ".1")
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        except OSError:  # no inode left: the log stays where it was
            os.replace(self.path + ".1", self.path)
            raise
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.close(self.fd)
        self.fd = fd


def relay_until_exit(child: Any, pipe: int, log: TaskLog) -> int:
    """Copy the task's output from `pipe` into `log` until the task exits, then what is left in
    the pipe (its last lines, a traceback, before the exit is recorded); its return code."""
    import select

    while child.poll() is None:
        if select.select([pipe], [], [], 0.2)[0]:
            log.write(os.read(pipe, 1 << 16))
    while select.select([pipe], [], [], 0)[0]:  # the write end stays ours: never at EOF
        log.write(os.read(pipe, 1 << 16))
    return int(child.returncode)


def _sleep_unless(path: str, seconds: float) -> bool:
    """Sleep up to `seconds`, waking early (True) if `path` appears."""
    deadline = time.time() + seconds
    while time.time() < deadline:
        if os.path.exists(path):
            return True
        time.sleep(min(0.1, max(0.0, deadline - time.time())))
    return os.path.exists(path)


def _task_env(run_id: str, task: dict[str, Any]) -> dict[str, str]:
    env = dict(os.environ)
    env.update({str(k): str(v) for k, v in (task.get("env") or {}).items()})
    if task.get("cuda_visible_devices") is not None and "CUDA_VISIBLE_DEVICES" not in (
            task.get("env") or {}):
        env["CUDA_VISIBLE_DEVICES"] = str(task["cuda_visible_devices"])
    env["TFCTL_RUN_ID"], env["TFCTL_TASK"] = run_id, task["name"]
    return env


def supervise(run_dir: str, run_id: str, task: dict[str, Any], workdir: str) -> int:
    """Start the task, record it, restart it by policy, record its end. Runs detached."""
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        # A Python handler (not SIG_IGN, which children would inherit through exec).
        signal.signal(sig, lambda *_: None)
    try:
        with open("/proc/self/comm", "w") as comm:
            comm.write("tfctl-supervise")
    except OSError:
        pass  # only cosmetic: how `ps`/`top` name this process
    name = task["name"]
    paths = {s: task_file(run_dir, name, s) for s in (".pid.json", ".exit.json", ".stopped")}
    policy = task.get("restart") or {}
    mode, most = policy.get("policy", "never"), int(policy.get("max", 3))
    argv = [os.path.expanduser(str(a)) if i == 0 else str(a)
            for i, a in enumerate(task["argv"])]
    cwd = os.path.join(workdir, os.path.expanduser(task.get("cwd") or workdir))
    env = _task_env(run_id, task)
    me = os.getpid()
    restarts, last_exit = 0, None
    import subprocess  # not at the top: every agent start would pay for it (launch_tasks has it)

    log = TaskLog(task_file(run_dir, name, ".log"), int(task.get("log_max_bytes") or
                                                         LOG_MAX_BYTES))
    slot = reserve_slot(task_file(run_dir, name, ".exit.slot"))  # the end's record, room or not
    _task_log[:] = [log]
    pipe, out = os.pipe()  # `out` stays open here: restarts write to the same pipe
    while True:
        try:
            child = subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                                     stdout=out, stderr=out)
        except (OSError, ValueError) as exc:  # ValueError: a NUL byte or `=` in argv/env
            error = f"cannot start {name}: {argv[0]}: {getattr(exc, 'strerror', None) or exc}"
            _log(error)
            write_json_when_room(paths[".exit.json"], dict(
                exit_code=127, signal=None, ended_at=now(), error=error, restarts=restarts),
                slot=slot)
            return 1
        try:
            write_json(paths[".pid.json"], {
                "pid": child.pid, "pgid": os.getpgrp(), "supervisor_pid": me,
                "started_at": now(), "start_ticks": start_ticks(child.pid),
                "supervisor_start_ticks": start_ticks(me), "restarts": restarts,
                "last_exit": last_exit, "boot_id": boot_id()})
        except OSError as exc:  # no room: the task runs on, its output relayed all the same
            _log(f"{name}'s pid record could not be written: {exc.strerror or exc}")
        if os.path.exists(paths[".stopped"]):  # `stop` ran between our check and the start
            child.terminate()
        last_exit = exit_record(relay_until_exit(child, pipe, log))
        failed = last_exit["exit_code"] != 0
        if mode in ("always", "on-failure") and (failed or mode == "always") and restarts < most \
                and not os.path.exists(paths[".stopped"]):
            restarts += 1
            _log(f"restarting {name} (restart {restarts}/{most}) after exit "
                 f"{_describe_exit(last_exit)}")
            if policy.get("together"):
                _log(f"waiting for the peers of {name} to stop too, to restart together")
                _wait_for_peers_down(_training_peers(env), paths[".stopped"])
            if not _sleep_unless(paths[".stopped"], float(policy.get("backoff_s", 2.0))):
                continue
        write_json_when_room(paths[".exit.json"], dict(last_exit, restarts=restarts), slot=slot)
        return 0


# MultiWorkerMirrored workers cannot rejoin a running group: all must restart. A failed peer
# makes the survivors fail within seconds; each supervisor waits until it has seen every peer's
# port closed once (each has ended), so that no one restarts into the old group.
PEERS_DOWN_TIMEOUT_S = 120.0


def _training_peers(env: dict[str, str]) -> list[tuple[str, int]]:
    """The other training tasks (workers, chief) of the task's TF_CONFIG, as (host, port)."""
    try:
        config = json.loads(env.get("TF_CONFIG") or "{}")
    except ValueError:
        return []
    me = config.get("task") or {}
    peers = []
    for kind in ("chief", "worker"):
        for index, address in enumerate((config.get("cluster") or {}).get(kind) or []):
            if (kind, index) != (me.get("type"), me.get("index")):
                host, _, port = str(address).rpartition(":")
                peers.append((host.strip("[]"), int(port)))
    return peers


def _wait_for_peers_down(peers: list[tuple[str, int]], stopped: str) -> None:
    import socket

    started = time.time()
    pending, deadline = set(peers), started + PEERS_DOWN_TIMEOUT_S
    while pending and time.time() < deadline and not os.path.exists(stopped):
        for peer in list(pending):
            try:
                socket.create_connection(peer, timeout=0.5).close()
            except OSError as exc:
                pending.discard(peer)  # seen down once: it ended, or is between restarts
                _log(f"peer {peer[0]}:{peer[1]} down after {time.time() - started:.1f} s "
                     f"({exc.__class__.__name__})")
        time.sleep(0.2)
    if pending:
        _log(f"peers still up after {time.time() - started:.0f} s: restarting anyway")


def launch_tasks(run_dir: str, workdir: str, run_id: str, manifest: dict[str, Any],
                 names: list[str] | None, timeout_s: float = 15.0) -> dict[str, Any]:
    """Start each task under its supervisor; return once every one has recorded its pid."""
    tasks = manifest_tasks(manifest, names)
    for task in tasks:
        record = read_json(task_file(run_dir, task["name"], ".pid.json"))
        if record and not os.path.exists(task_file(run_dir, task["name"], ".exit.json")) and \
                not from_other_boot(record) and \
                proc_stat(record["supervisor_pid"]) is not None and \
                start_ticks(record["supervisor_pid"]) == record.get("supervisor_start_ticks"):
            raise AgentError("task_running", f"task {task['name']} of run {run_id} is already "
                             "running on this host", task=task["name"])
    import subprocess  # noqa: F401  # once here, before the forks: every supervisor inherits it

    for task in tasks:
        for suffix in (".pid.json", ".exit.json", ".stopped"):
            path = task_file(run_dir, task["name"], suffix)
            if os.path.exists(path):
                os.remove(path)
        log = task_file(run_dir, task["name"], ".log")
        fork_detached(functools.partial(supervise, run_dir, run_id, task, workdir), log)
    started: dict[str, Any] = {}
    deadline = time.time() + timeout_s
    while len(started) < len(tasks):
        for task in tasks:
            pid_rec = read_json(task_file(run_dir, task["name"], ".pid.json"))
            exit_rec = read_json(task_file(run_dir, task["name"], ".exit.json"))
            if pid_rec or exit_rec:
                started[task["name"]] = {
                    "pid": (pid_rec or {}).get("pid"), "pgid": (pid_rec or {}).get("pgid"),
                    "started_at": (pid_rec or {}).get("started_at"),
                    "error": (exit_rec or {}).get("error")}
        if len(started) < len(tasks):
            if time.time() > deadline:
                missing = [t["name"] for t in tasks if t["name"] not in started]
                raise AgentError("launch_timeout", f"tasks {', '.join(missing)} did not start "
                                 f"within {timeout_s:.0f} s", tasks=started)
            time.sleep(0.01)
    failed = {n: s["error"] for n, s in started.items() if s["error"]}
    if failed:
        raise AgentError("spawn_failed", "; ".join(failed.values()), tasks=started)
    return {"tasks": started}
