"""The run's watcher on each host: applies the end of the job there, with no client connected.

Part of the agent program (see `main.py`): stdlib only, Python >= 3.8, Linux, no tfctl imports.

`launch` starts one watcher per run per host (detached, like the supervisors; `tfctl-watch` in
`ps`). The manifest's `end` rule names the tasks whose end is the job's end (the chief; worker 0
in the flags style; else every worker) with their addresses and ports. Each second the watcher
looks at those tasks: on its own host through their exit records, on the other hosts through
their task ports — TensorFlow's ports are reachable between the hosts anyway, so no SSH between
hosts is needed, and a host the client cannot reach still ends its part. A remote port counts as
closed for good once it has refused connections for `CLOSED_FOR_GOOD_S` (longer than a restart's
backoff plus TensorFlow's start) after the watcher saw it accept one, or after `up` said every
task of the run had started (`up.json`, written by the status read that ends `up`; a job may end
before the watcher's first look), or once `up` would have given up waiting for it.

When the job has ended the watcher stops this host's serving tasks (parameter servers, and the
workers of a ParameterServer job, which only serve), gives the other workers and the evaluator
`WORKER_GRACE_S` to finish on their own, stops TensorBoard after its grace unless it is kept,
records why in `finished.json` (unless the client already did), and exits once nothing of the
run is left on the host. It also exits when every task of the host has ended otherwise
(`tfctl down`).
"""

from __future__ import annotations

import functools
import os
import signal
import time
from typing import Any

from tfctl.remote.agent.proc import same_process, start_ticks
from tfctl.remote.agent.record import EventLog, GpuRecorder, ThroughputTail
from tfctl.remote.agent.run import (
    fork_detached,
    load_manifest,
    now,
    read_json,
    task_file,
    write_json,
)
from tfctl.remote.agent.state import WATCH_PID, stop_tasks

WATCH_TICK_S = 1.0
CLOSED_FOR_GOOD_S = 20.0
WORKER_GRACE_S = 60.0
STOP_GRACE_S = 5.0
UP_MARK = "up.json"


def start_watcher(run_dir: str, run_id: str) -> int | None:
    """Start the run's watcher on this host unless one already runs; its pid, or None."""
    manifest = load_manifest(run_dir)
    if not manifest.get("end"):
        return None  # a run launched by an older client: its client applies the end
    record = read_json(os.path.join(run_dir, WATCH_PID)) or {}
    if same_process(record.get("pid"), record.get("start_ticks")):
        return int(record["pid"])
    log = os.path.join(run_dir, "watch.log")
    return fork_detached(functools.partial(watch_run, run_dir, run_id), log)


def watch_run(run_dir: str, run_id: str) -> int:
    try:
        with open("/proc/self/comm", "w") as comm:
            comm.write("tfctl-watch")
    except OSError:
        pass  # only cosmetic
    me = os.getpid()
    signal.signal(signal.SIGTERM, _stop_watching)
    write_json(os.path.join(run_dir, WATCH_PID), {"pid": me, "start_ticks": start_ticks(me)})
    manifest = load_manifest(run_dir)
    local = [t["name"] for t in manifest.get("tasks", [])]
    recorder, events = GpuRecorder(run_dir, run_id), EventLog(run_dir, local)
    training = [t["name"] for t in manifest.get("tasks", []) if t["type"] in ("worker", "chief")]
    speed = ThroughputTail(run_dir, training, manifest.get("throughput_patterns") or [],
                           recorder.started)
    recorder.start()
    try:
        cause = watch_until_end(run_dir, manifest, local, recorder, events, speed)
        if cause is not None:
            code = decider_exit_code(run_dir, manifest)
            events.write({"event": "end", "cause": cause, "exit_code": code})
            apply_end(run_dir, run_id, manifest, cause, code)
    except StopWatching:
        pass  # a whole-run stop (`tfctl down`): its tasks are ended; keep the last records
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # the last records are written whole
        events.tick()
        speed.tick()
        recorder.stop()
    return 0


class StopWatching(BaseException):
    """Raised in the watcher by SIGTERM, which `stop_tasks` sends when it stops a whole run (a
    BaseException, like KeyboardInterrupt, so no `except Exception` on the way swallows it)."""


def _stop_watching(signum: int, frame: Any) -> None:
    raise StopWatching


def watch_until_end(run_dir: str, manifest: dict[str, Any], local: list[str],
                    recorder: GpuRecorder, events: EventLog,
                    speed: ThroughputTail) -> str | None:
    """Why the job ended, or None when this host's tasks all ended otherwise (`tfctl down`)."""
    judge = EndJudge(manifest["end"], manifest.get("host"), time.time())
    while True:
        events.tick()
        recorder.tick()
        speed.tick()
        ended = local_ends(run_dir, local)
        judge.was_up = judge.was_up or os.path.exists(os.path.join(run_dir, UP_MARK))
        cause = judge.verdict(ended, time.time(), port_accepts)
        finished = read_json(os.path.join(run_dir, "finished.json"))
        if finished is not None and (finished.get("status") or {}).get("state") != "finished":
            return None  # rolled back (`aborted`) or stopped by a client: nothing to apply
        if cause is None and finished is not None:
            cause = "finished"  # the client applied the end first
        if cause is not None:
            return cause
        launched = [n for n in local if os.path.exists(task_file(run_dir, n, ".pid.json"))]
        if launched and all(n in ended for n in launched) and (
                len(launched) == len(local) or _any_stopped(run_dir, launched)):
            return None  # stopped by `tfctl down` or a rollback, or all ended by themselves
        time.sleep(WATCH_TICK_S)


def _any_stopped(run_dir: str, names: list[str]) -> bool:
    return any(os.path.exists(task_file(run_dir, n, ".stopped")) for n in names)


def local_ends(run_dir: str, names: list[str]) -> dict[str, dict[str, Any]]:
    """The exit record of each task of this host that ended for good."""
    ends = {}
    for name in names:
        record = read_json(task_file(run_dir, name, ".exit.json"))
        if record is not None:
            ends[name] = record
    return ends


def port_accepts(address: str, port: int) -> bool:
    import socket

    try:
        socket.create_connection((address, port), timeout=1.0).close()
    except OSError:
        return False
    return True


class EndJudge:
    """Decides, from what one host can see, whether the job has ended, and why."""

    def __init__(self, rule: dict[str, Any], host: str | None, started_s: float) -> None:
        self.mode = rule.get("mode", "any")
        self.host = host
        self.deciders = [d for d in rule.get("deciders", [])
                         if d.get("host") == host or d.get("port")]
        self.start_timeout_s = float(rule.get("start_timeout_s", 180.0))
        self.started_s = started_s
        self.seen_open: set[str] = set()
        self.was_up = False
        self.closed_since: dict[str, float] = {}

    def verdict(self, local_ended: dict[str, dict[str, Any]], now_s: float,
                accepts: Any) -> str | None:
        if not self.deciders:
            return None
        done = [self._ended(d, local_ended, now_s, accepts) for d in self.deciders]
        ended = all(done) if self.mode == "all" else any(done)
        if not ended:
            return None
        names = [d["name"] for i, d in enumerate(self.deciders) if done[i]]
        return f"{', '.join(names)} ended"

    def _ended(self, decider: dict[str, Any], local_ended: dict[str, dict[str, Any]],
               now_s: float, accepts: Any) -> bool:
        name = decider["name"]
        if decider.get("host") == self.host:
            return name in local_ended
        if accepts(decider["address"], int(decider["port"])):
            self.seen_open.add(name)
            self.closed_since.pop(name, None)
            return False
        since = self.closed_since.setdefault(name, now_s)
        if not (name in self.seen_open or self.was_up) and \
                now_s - self.started_s < self.start_timeout_s:
            return False  # not up yet, as far as we know: `up` is still waiting for it
        return now_s - since >= float(decider.get("closed_for_good_s", CLOSED_FOR_GOOD_S))


def decider_exit_code(run_dir: str, manifest: dict[str, Any]) -> int | None:
    """The exit status of a task of this host whose end was the job's (128+n for a signal)."""
    for decider in manifest["end"].get("deciders", []):
        if decider.get("host") != manifest.get("host"):
            continue
        record = read_json(task_file(run_dir, decider["name"], ".exit.json")) or {}
        if record.get("exit_code") is not None:
            return int(record["exit_code"])
        if record.get("signal"):
            return 137 if record["signal"] == "SIGKILL" else 143
    return None


def apply_end(run_dir: str, run_id: str, manifest: dict[str, Any], cause: str,
              exit_code: int | None = None) -> None:
    """Stop what serves, let the rest finish, keep or stop TensorBoard; record why."""
    # Tasks never launched here (a rollback between phases) are nobody's to wait for or stop.
    tasks = [t for t in manifest.get("tasks", [])
             if os.path.exists(task_file(run_dir, t["name"], ".pid.json"))]
    rule = manifest["end"]
    serving = set(rule.get("serving", ["ps"]))
    names = [t["name"] for t in tasks]
    path = os.path.join(run_dir, "finished.json")
    if not os.path.exists(path):
        write_json(path, {"status": {"state": "finished", "cause": cause, "exit_code": exit_code,
                                     "by": f"watcher on {manifest.get('host')}"},
                          "finished_at": now()})
    _stop_where(run_dir, run_id, [t["name"] for t in tasks if t["type"] in serving])
    workers = [t["name"] for t in tasks if t["type"] in ("worker", "chief", "evaluator")
               and t["type"] not in serving]
    _wait_for(run_dir, workers, WORKER_GRACE_S)
    _stop_where(run_dir, run_id, workers)
    board = [t["name"] for t in tasks if t["type"] == "tensorboard"]
    tensorboard = rule.get("tensorboard") or {}
    if board and not tensorboard.get("keep"):
        _wait_for(run_dir, board, float(tensorboard.get("grace_s", 300.0)))
        _stop_where(run_dir, run_id, board)
    rest = [n for n in names if n not in board or not tensorboard.get("keep")]
    _stop_where(run_dir, run_id, rest)


def _stop_where(run_dir: str, run_id: str, names: list[str]) -> None:
    alive = [n for n in names if read_json(task_file(run_dir, n, ".exit.json")) is None]
    if alive:
        stop_tasks(run_dir, run_id, alive, STOP_GRACE_S)


def _wait_for(run_dir: str, names: list[str], seconds: float) -> None:
    deadline = time.time() + seconds
    while time.time() < deadline and len(local_ends(run_dir, names)) < len(names):
        time.sleep(WATCH_TICK_S)
