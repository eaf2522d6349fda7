"""Each task under its own supervisor: started, recorded, restarted by policy, its end recorded.

Part of the agent program (`__init__.py`): stdlib only, Python >= 3.8, Linux, no tfctl imports.

Each task runs under a detached supervisor (double fork, `setsid`: it leads the task's session and
process group, holds no descriptor of the SSH session, so SSH returns at once). The supervisor
records the task's pid, waits for it, restarts it by policy, and records how it ended; it shrugs
off SIGTERM/SIGINT/SIGHUP so that a TERM to the whole group still leaves it alive to write the
exit record. Its task's output goes through it into the task's log (tasklog.py).
"""

from __future__ import annotations

import functools  # loaded anyway (json imports re, which imports it)
import os
import signal
import time
from typing import Any

from tfctl.remote.agent.boot import boot_id, from_other_boot
from tfctl.remote.agent.detach import fork_detached
from tfctl.remote.agent.jsonfile import (
    now,
    read_json,
    reserve_slot,
    write_json,
    write_json_when_room,
)
from tfctl.remote.agent.netroute import resolve_found_at_start
from tfctl.remote.agent.proc import proc_stat, signal_name, start_ticks
from tfctl.remote.agent.rundir import manifest_tasks, task_file
from tfctl.remote.agent.tasklog import LOG_MAX_BYTES, TaskLog
from tfctl.remote.agent.wire import AgentError, json_loads


def exit_record(returncode: int) -> dict[str, Any]:
    if returncode < 0:
        return {"exit_code": None, "signal": signal_name(-returncode), "ended_at": now()}
    return {"exit_code": returncode, "signal": None, "ended_at": now()}


def _describe_exit(record: dict[str, Any]) -> str:
    return str(record["signal"] or record["exit_code"])


_task_log: list[TaskLog] = []
"""The supervisor's task log, once it relays one (its own lines go there too)."""


def _log(message: str) -> None:
    line = f"==> tfctl: {message}\n".encode()
    if _task_log:
        _task_log[0].write(line)
    else:
        os.write(1, line)


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
    for line in resolve_found_at_start(env):  # GLOO_SOCKET_IFNAME: what only this host knows
        _log(line)
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
