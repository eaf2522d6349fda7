"""One task's supervision inside the run's keeper (keeper.py): started, recorded, restarted by
policy, its output relayed into its log, its end recorded.

Part of the agent program (`__init__.py`): stdlib only, Python >= 3.8, Linux, no tfctl imports.

Each task of a host is a thread of the keeper (`TaskSupervision`). The task leads its own
session and process group (`start_new_session`), so that a stop signals the task's group and
never the keeper, and the task outlives the keeper as it outlives the SSH session that started
it. Its stdout and stderr are a named pipe in the run directory (`OutputPipe`) that the keeper
relays into the task's log (tasklog.py). The task holds a read end of that pipe too: were the
keeper killed, the task's writes would fill the pipe (1 MiB where the host allows it) and then
wait, rather than fail with EPIPE; the next keeper opens the pipe by its name, takes the task
back (`adopt`) and relays what waited. A task taken back is not the keeper's child: its end is
seen (its pid, checked by its start time, is gone) but its exit status is not known, and its
record says so.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable
from typing import Any

from tfctl.remote.agent.boot import boot_id
from tfctl.remote.agent.jsonfile import (
    now,
    reserve_slot,
    write_json,
    write_json_when_room,
)
from tfctl.remote.agent.netroute import resolve_found_at_start
from tfctl.remote.agent.proc import same_process, signal_name, start_ticks
from tfctl.remote.agent.rundir import task_file
from tfctl.remote.agent.tasklog import LOG_MAX_BYTES, TaskLog
from tfctl.remote.agent.wire import json_loads

PIPE_BYTES = 1 << 20
"""The task's output pipe's size where the host allows it (`/proc/sys/fs/pipe-max-size`, 1 MiB
by default): how much output a task may write while no keeper relays it before its writes wait."""
F_SETPIPE_SZ = 1031  # fcntl.F_SETPIPE_SZ from Python 3.10; Linux's value


def exit_record(returncode: int) -> dict[str, Any]:
    if returncode < 0:
        return {"exit_code": None, "signal": signal_name(-returncode), "ended_at": now()}
    return {"exit_code": returncode, "signal": None, "ended_at": now()}


def _describe_exit(record: dict[str, Any]) -> str:
    if record.get("status_unknown"):
        return "status unknown"
    return str(record["signal"] or record["exit_code"])


def _task_env(run_id: str, task: dict[str, Any]) -> dict[str, str]:
    env = dict(os.environ)
    env.update({str(k): str(v) for k, v in (task.get("env") or {}).items()})
    if task.get("cuda_visible_devices") is not None and "CUDA_VISIBLE_DEVICES" not in (
            task.get("env") or {}):
        env["CUDA_VISIBLE_DEVICES"] = str(task["cuda_visible_devices"])
    env["TFCTL_RUN_ID"], env["TFCTL_TASK"] = run_id, task["name"]
    return env


class OutputPipe:
    """A task's stdout and stderr: a named pipe in the run directory (`<task>.pipe`), which a
    keeper opens for reading by its name, first or after another keeper. Where the file system
    makes no named pipe, an anonymous one: then a killed keeper's tasks find their output
    closed (EPIPE) as before there was a keeper."""

    def __init__(self, path: str, fresh: bool) -> None:
        self.path = path
        if fresh or not os.path.exists(path):  # (a task taken back that writes elsewhere)
            try:
                if os.path.lexists(path):
                    os.unlink(path)
                os.mkfifo(path, 0o600)
            except OSError:
                self.read_fd, self.write_fd = os.pipe()
                os.set_blocking(self.read_fd, False)
                return
        # Read end first, not blocking: opening the write end then finds a reader.
        self.read_fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        self.write_fd = os.open(path, os.O_WRONLY)  # ours: a read never meets end-of-file
        try:
            import fcntl

            fcntl.fcntl(self.read_fd, F_SETPIPE_SZ, PIPE_BYTES)
        except OSError:
            pass  # the default 64 KiB: less room while no keeper relays

    def drain(self, log: TaskLog) -> None:
        """Everything waiting in the pipe, into the log."""
        while True:
            try:
                data = os.read(self.read_fd, 1 << 16)
            except BlockingIOError:
                return
            if not data:
                return
            log.write(data)

    def relay_until(self, ended: Callable[[], bool], pidfd: int | None, log: TaskLog) -> None:
        """Relay the output into `log` until `ended()`, then what is left in the pipe (the
        task's last lines, a traceback, before its end is recorded). `pidfd`, where the host
        has them, wakes the wait at the task's end; without, the end is looked for every
        0.2 s."""
        import select

        watched = [self.read_fd] + ([pidfd] if pidfd is not None else [])
        while not ended():
            if self.read_fd in select.select(watched, [], [], 0.2 if pidfd is None else 5.0)[0]:
                self.drain(log)
        self.drain(log)

    def close(self) -> None:
        """Closed and its name removed: the task has ended for good."""
        for fd in (self.read_fd, self.write_fd):
            with contextlib.suppress(OSError):
                os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(self.path)


def open_pidfd(pid: int, ticks: int | None = None) -> int | None:
    """A pidfd of `pid` (readable once it has ended), checked to be the process started at
    `ticks` where given; None where the host has none (Python < 3.9, Linux < 5.3)."""
    opener = getattr(os, "pidfd_open", None)
    if opener is None:
        return None
    try:
        fd = int(opener(pid))
    except OSError:
        return None
    if ticks is not None and start_ticks(pid) != ticks:
        os.close(fd)
        return None
    return fd


class TaskSupervision:
    """One task under the keeper: `run()` (a thread's body) starts it, or takes it back from a
    keeper that is gone (`adopt`: its pid record), relays its output, restarts it by its
    policy and records its end. `keeper_pid`/`keeper_ticks` go into its pid record: the task's
    supervisor, as status and the claims judge it."""

    def __init__(self, run_dir: str, run_id: str, task: dict[str, Any], workdir: str,
                 keeper: tuple[int, int | None], adopt: dict[str, Any] | None = None) -> None:
        self.run_dir, self.run_id, self.task, self.workdir = run_dir, run_id, task, workdir
        self.name = str(task["name"])
        self.keeper_pid, self.keeper_ticks = keeper
        self.adopt = adopt
        self.log = TaskLog(task_file(run_dir, self.name, ".log"),
                           int(task.get("log_max_bytes") or LOG_MAX_BYTES))
        self.paths = {s: task_file(run_dir, self.name, s)
                      for s in (".pid.json", ".exit.json", ".stopped")}
        import threading

        self.started = threading.Event()
        """Set once the task's first process has its pid record, or has failed to start, or
        (taken back) once it is ours."""

    def say(self, message: str) -> None:
        """A line of tfctl's own in the task's log."""
        self.log.write(f"==> tfctl: {message}\n".encode())

    def run(self) -> None:
        try:
            self._run()
        finally:
            self.started.set()

    def _run(self) -> None:
        slot = reserve_slot(task_file(self.run_dir, self.name, ".exit.slot"))
        policy = self.task.get("restart") or {}
        mode, most = policy.get("policy", "never"), int(policy.get("max", 3))
        argv = [os.path.expanduser(str(a)) if i == 0 else str(a)
                for i, a in enumerate(self.task["argv"])]
        cwd = os.path.join(self.workdir, os.path.expanduser(self.task.get("cwd") or
                                                            self.workdir))
        env = _task_env(self.run_id, self.task)
        pipe = OutputPipe(task_file(self.run_dir, self.name, ".pipe"), fresh=self.adopt is None)
        try:
            end = self._until_the_end(pipe, mode, most, policy, argv, cwd, env)
        finally:
            pipe.close()  # before the end's record: whoever reads the end finds no pipe left
        write_json_when_room(self.paths[".exit.json"], end, slot=slot)

    def _until_the_end(self, pipe: OutputPipe, mode: str, most: int, policy: dict[str, Any],
                       argv: list[str], cwd: str, env: dict[str, str]) -> dict[str, Any]:
        """The task's processes, one after another by its policy: the last one's end."""
        restarts, last_exit = 0, None
        if self.adopt is not None:
            restarts = int(self.adopt.get("restarts") or 0)
            last_exit = self._take_back(self.adopt, pipe)
            if not self._again(mode, most, restarts, last_exit, policy, env):
                return dict(last_exit, restarts=restarts)
            restarts += 1
        else:
            for line in resolve_found_at_start(env):  # GLOO_SOCKET_IFNAME: this host's own
                self.say(line)
        while True:
            ended = self._start_once(argv, cwd, env, pipe, restarts, last_exit)
            if isinstance(ended, str):
                return dict(exit_code=127, signal=None, ended_at=now(), error=ended,
                            restarts=restarts)
            last_exit = ended
            if not self._again(mode, most, restarts, last_exit, policy, env):
                return dict(last_exit, restarts=restarts)
            restarts += 1

    def _start_once(self, argv: list[str], cwd: str, env: dict[str, str], pipe: OutputPipe,
                    restarts: int, last_exit: dict[str, Any] | None) -> dict[str, Any] | str:
        """Start the task's process once and relay it to its end: its exit record, or why it
        could not start."""
        import subprocess

        try:
            child = subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                                     stdout=pipe.write_fd, stderr=pipe.write_fd,
                                     start_new_session=True, pass_fds=(pipe.read_fd,))
        except (OSError, ValueError) as exc:  # ValueError: a NUL byte or `=` in argv/env
            error = f"cannot start {self.name}: {argv[0]}: " \
                    f"{getattr(exc, 'strerror', None) or exc}"
            self.say(error)
            return error
        pidfd = open_pidfd(child.pid)  # our child: its pid is not reused before we reap it
        try:
            write_json(self.paths[".pid.json"], {
                "pid": child.pid, "pgid": child.pid, "supervisor_pid": self.keeper_pid,
                "started_at": now(), "start_ticks": start_ticks(child.pid),
                "supervisor_start_ticks": self.keeper_ticks, "restarts": restarts,
                "last_exit": last_exit, "boot_id": boot_id()})
        except OSError as exc:  # no room: the task runs on, its output relayed all the same
            self.say(f"{self.name}'s pid record could not be written: {exc.strerror or exc}")
        self.started.set()
        if os.path.exists(self.paths[".stopped"]):  # `stop` ran between our check and start
            child.terminate()
        try:
            pipe.relay_until(lambda: child.poll() is not None, pidfd, self.log)
        finally:
            if pidfd is not None:
                os.close(pidfd)
        return exit_record(int(child.returncode))

    def _take_back(self, record: dict[str, Any], pipe: OutputPipe) -> dict[str, Any]:
        """Relay a running task whose keeper is gone until it ends; its exit record (status
        unknown: it is not our child)."""
        pid, ticks = int(record["pid"]), record.get("start_ticks")
        try:
            write_json(self.paths[".pid.json"], dict(
                record, supervisor_pid=self.keeper_pid, supervisor_start_ticks=self.keeper_ticks,
                taken_back_at=now()))
        except OSError as exc:
            self.say(f"{self.name}'s pid record could not be written: {exc.strerror or exc}")
        self.say(f"{self.name} (pid {pid}) taken back by a new keeper (pid {self.keeper_pid}): "
                 "the one before was gone")
        self.started.set()
        pidfd = open_pidfd(pid, ticks)
        try:
            pipe.relay_until(lambda: not same_process(pid, ticks), pidfd, self.log)
        finally:
            if pidfd is not None:
                os.close(pidfd)
        self.say(f"{self.name} ended while taken back: its exit status is not known")
        return {"exit_code": None, "signal": None, "ended_at": now(), "status_unknown": True}

    def _again(self, mode: str, most: int, restarts: int, last_exit: dict[str, Any],
               policy: dict[str, Any], env: dict[str, str]) -> bool:
        """Whether the policy starts the task again after `last_exit` (after its backoff, and
        its peers' stop for a restart together); an end whose status is not known is no
        failure to `on-failure`."""
        failed = not last_exit.get("status_unknown") and last_exit["exit_code"] != 0
        if not (mode in ("always", "on-failure") and (failed or mode == "always") and
                restarts < most and not os.path.exists(self.paths[".stopped"])):
            return False
        self.say(f"restarting {self.name} (restart {restarts + 1}/{most}) after exit "
                 f"{_describe_exit(last_exit)}")
        if policy.get("together"):
            self.say(f"waiting for the peers of {self.name} to stop too, to restart together")
            _wait_for_peers_down(_training_peers(env), self.paths[".stopped"], self.say)
        return not _sleep_unless(self.paths[".stopped"], float(policy.get("backoff_s", 2.0)))


def _sleep_unless(path: str, seconds: float) -> bool:
    """Sleep up to `seconds`, waking early (True) if `path` appears."""
    deadline = time.time() + seconds
    while time.time() < deadline:
        if os.path.exists(path):
            return True
        time.sleep(min(0.1, max(0.0, deadline - time.time())))
    return os.path.exists(path)


# MultiWorkerMirrored workers cannot rejoin a running group: all must restart. A failed peer
# makes the survivors fail within seconds; each supervisor waits until it has seen every peer's
# port closed once (each has ended), so that no one restarts into the old group.
PEERS_DOWN_TIMEOUT_S = 120.0


def _training_peers(env: dict[str, str]) -> list[tuple[str, int]]:
    """The other training tasks (workers, chief) of the task's TF_CONFIG, as (host, port); for
    a rank of a process group (torch, jax), rank 0's port, the one port its ranks have."""
    if "TF_CONFIG" not in env:
        return _rank0(env)
    try:
        config = json_loads(env.get("TF_CONFIG") or "{}")
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


def _rank0(env: dict[str, str]) -> list[tuple[str, int]]:
    """Rank 0's (host, port) from torchrun's or JAX's variables; none for rank 0 itself."""
    if env.get("MASTER_PORT", "").isdigit() and env.get("RANK", "0") != "0":
        return [(env.get("MASTER_ADDR", ""), int(env["MASTER_PORT"]))]
    host, _, port = env.get("JAX_COORDINATOR_ADDRESS", "").rpartition(":")
    if port.isdigit() and env.get("JAX_PROCESS_ID", "0") != "0":
        return [(host.strip("[]"), int(port))]
    return []


def _wait_for_peers_down(peers: list[tuple[str, int]], stopped: str,
                         say: Callable[[str], None]) -> None:
    import socket

    started = time.time()
    pending, deadline = set(peers), started + PEERS_DOWN_TIMEOUT_S
    while pending and time.time() < deadline and not os.path.exists(stopped):
        for peer in list(pending):
            try:
                socket.create_connection(peer, timeout=0.5).close()
            except OSError as exc:
                pending.discard(peer)  # seen down once: it ended, or is between restarts
                say(f"peer {peer[0]}:{peer[1]} down after {time.time() - started:.1f} s "
                     f"({exc.__class__.__name__})")
        time.sleep(0.2)
    if pending:
        say(f"peers still up after {time.time() - started:.0f} s: restarting anyway")
