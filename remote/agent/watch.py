"""The run's watch on each host: applies the end of the job there, with no client connected.

Part of the agent program (`__init__.py`): stdlib only, Python >= 3.8, Linux, no tfctl imports.

The watch is the main thread of the run's keeper (keeper.py), the one process that also keeps
the host's tasks; "the watcher" below is it. The manifest's `end` rule names the tasks whose
end is the job's end (the chief; worker 0 in the flags style; else every worker) with their
addresses and ports. Each second the watcher
looks at those tasks: on its own host through their exit records, on the other hosts through
their task ports — TensorFlow's ports are reachable between the hosts anyway, so no SSH between
hosts is needed, and a host the client cannot reach still ends its part. A remote port counts as
closed for good once it has refused connections for `CLOSED_FOR_GOOD_S` (longer than a restart's
backoff plus TensorFlow's start) after the watcher saw it accept one, or after `up` said every
task of the run had started (`up.json`, written by the status read that ends `up`; a job may end
before the watcher's first look), or once `up` would have given up waiting for it.

A refusal and silence are told apart (`probe_port`): a refusal (ECONNREFUSED, the peer's host
answered the connect with a reset) says the task is gone; silence (a timeout, no route, host or
network unreachable) says only that this host cannot see the peer: a cut link, a switch
rebooting, a peer host powered off. TensorFlow's own connections wait through such an outage, so
silence never counts toward "closed for good": the tasks here keep running while the watcher
records the silence in `silence.json` (which the status operation reports) and in
`events.jsonl`. Only silence that outlasts the job's `silence_window_s` (default
`SILENCE_WINDOW_S`) ends this host's part, as the job's end would, with the silence as its cause:
a host cut off for good does not keep its parameter servers forever.

A job of ranks (torch, jax; the rule's mode `group`) ends with rank 0, seen as above, or with
the failure of any rank of this host (its exit record): the ranks on other hosts carry no port
tfctl watches, and learn of it through rank 0, whose collectives fail with it.

When the job has ended the watcher stops this host's serving tasks (parameter servers, and the
workers of a ParameterServer job, which only serve), gives the other workers and the evaluator
`WORKER_GRACE_S` to finish on their own (none where a group failed: its ranks are stopped at
once), stops TensorBoard after its grace unless it is kept, records why in `finished.json`
(unless the client already did), and ends; the keeper exits once none of its tasks runs (a
kept TensorBoard keeps it). The watch also ends when every task of the host has ended otherwise
(`tfctl down`). Where the manifest asks for word of the end (`job.notify`, on the chief's host
only), it starts the notifier (`notify.py`) as soon as the end is judged, and on a `down` of a
run that was up (a rollback is the `up`'s own failure, said at its terminal).
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import time
from typing import Any

from tfctl.remote.agent.activity import start_activity
from tfctl.remote.agent.claims import release_run
from tfctl.remote.agent.idlewatch import IdleWatch
from tfctl.remote.agent.jsonfile import now, read_json, write_json, write_json_when_room
from tfctl.remote.agent.ledger import RunLedger
from tfctl.remote.agent.notify import start_notifier
from tfctl.remote.agent.record import EventLog, GpuRecorder, ThroughputTail, space_of
from tfctl.remote.agent.rundir import load_manifest, task_file
from tfctl.remote.agent.state import SILENCE_FILE, stop_tasks

WATCH_TICK_S = 1.0
CLOSED_FOR_GOOD_S = 20.0
SILENCE_WINDOW_S = 600.0
PROBE_TIMEOUT_S = 1.0
PROBES_AT_ONCE = 32
WORKER_GRACE_S = 60.0
STOP_GRACE_S = 5.0
UP_MARK = "up.json"


def watch_job(run_dir: str, run_id: str, wake: Any = None) -> None:
    """Watch the job's end on this host and apply it (the keeper's main thread, keeper.py);
    returns once the end is applied, or once this host's tasks all ended otherwise (`tfctl
    down`, the lab policy's idle rule). `wake` (a threading.Event the keeper sets at each
    task's end) brings the next look forward."""
    manifest = load_manifest(run_dir)
    local = [t["name"] for t in manifest.get("tasks", [])]
    recorder, events = GpuRecorder(run_dir, run_id), EventLog(run_dir, local)
    training = [t["name"] for t in manifest.get("tasks", []) if t["type"] in ("worker", "chief")]
    speed = ThroughputTail(run_dir, training, manifest.get("throughput_patterns") or [],
                           recorder.started)
    recorder.start()
    idle = IdleWatch(run_dir, run_id, manifest, events)
    ledger = RunLedger(run_dir, run_id, manifest, recorder)  # GPU use, ledger.py
    ledger.start()
    activity = start_activity(run_dir, manifest)  # a notebook session's kernels (activity.py)
    stopped = told = False
    try:
        cause = watch_until_end(run_dir, manifest, local, recorder, events, speed, idle, wake)
        if cause is not None:
            code = decider_exit_code(run_dir, manifest)
            events.write({"event": "end", "cause": cause, "exit_code": code})
            start_notifier(run_dir, manifest, "finished" if code == 0 else "failed", cause, code)
            told = True  # a `down` during the end's graces is no second word
            apply_end(run_dir, run_id, manifest, cause, code)
        else:
            stopped = True
    except StopWatching:
        stopped = True  # a whole-run stop (`tfctl down`): its tasks are ended; keep the records
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # the last records are written whole
        events.tick()
        speed.tick()
        recorder.stop()
        if activity is not None:
            activity.set()
        clear_silence(run_dir)
        ledger.stop()  # the run's last seconds counted before its claim goes
        release_run(run_id)  # nothing of the run holds this host's GPUs any more (claims.py)
        if stopped and not told and (idle.stopped or os.path.exists(os.path.join(run_dir,
                                                                                   UP_MARK))):
            # (no up mark: a rollback, the `up`'s own failure, said at its terminal)
            start_notifier(run_dir, manifest, "stopped", idle.stopped or
                           "stopped by `tfctl down`", None)


class StopWatching(BaseException):
    """Raised in the keeper by SIGTERM once none of its tasks runs, which `stop_tasks` sends
    when it stops a whole run (a BaseException, like KeyboardInterrupt, so no `except
    Exception` on the way swallows it)."""


def watch_until_end(run_dir: str, manifest: dict[str, Any], local: list[str],
                    recorder: GpuRecorder, events: EventLog,
                    speed: ThroughputTail, idle: IdleWatch | None = None,
                    wake: Any = None) -> str | None:
    """Why the job ended, or None when this host's tasks all ended otherwise (`tfctl down`,
    or the lab policy's idle rule, `idle`, which stops them here)."""
    judge = EndJudge(manifest["end"], manifest.get("host"), time.time())
    said = SilenceRecord(run_dir, events)
    while True:
        events.tick()
        recorder.tick()
        speed.tick()
        if idle is not None and idle.tick(recorder.latest, recorder.index_of_uuid, time.time()):
            idle.stop(local, time.time())
            return None
        ended = local_ends(run_dir, local)
        judge.was_up = judge.was_up or os.path.exists(os.path.join(run_dir, UP_MARK))
        cause = judge.verdict(ends_of_their_own(run_dir, ended), time.time(), probe_port)
        said.update(judge.silences())
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
        if wake is None:
            time.sleep(WATCH_TICK_S)
        else:
            wake.wait(WATCH_TICK_S)
            wake.clear()


def ends_of_their_own(run_dir: str, ended: dict[str, dict[str, Any]]
                      ) -> dict[str, dict[str, Any]]:
    """Of the tasks' exit records, those of tasks that ended by themselves. A task stopped by a
    client (`tfctl down`, which ends this watcher only once its grace is over, or a restart of
    the one task) ended by the stop, which says nothing of the job's end: judged an end, a
    stopped chief would be the job failing (killed by SIGTERM) and its notice would say so."""
    return {name: record for name, record in ended.items()
            if not os.path.exists(task_file(run_dir, name, ".stopped"))}


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


OPEN, REFUSED, SILENT = "open", "refused", "silent"


def connect_outcome(exc: OSError) -> str:
    """What a failed connect says about the peer: `refused` when its host answered with a reset
    (ECONNREFUSED: nothing listens there, the task has ended), else `silent` (a timeout, no
    route, host or network unreachable or down, a name that does not resolve): no answer, which
    says nothing about the task."""
    if isinstance(exc, ConnectionRefusedError) or exc.errno == errno.ECONNREFUSED:
        return REFUSED
    return SILENT


def connect_words(exc: OSError) -> str:
    """`timed out`, `No route to host`: the failed connect in its own words, short."""
    if exc.errno is None and "timed out" in str(exc):
        return "timed out"
    return exc.strerror or str(exc) or type(exc).__name__


def probe_port(address: str, port: int, timeout_s: float = PROBE_TIMEOUT_S) -> tuple[str, str]:
    """`(open|refused|silent, words)` for one TCP connect to the port."""
    import socket

    try:
        socket.create_connection((address, port), timeout=timeout_s).close()
    except OSError as exc:
        return connect_outcome(exc), connect_words(exc)
    return OPEN, "accepted"


class EndJudge:
    """Decides, from what one host can see, whether the job has ended, and why.

    `probe(address, port)` answers `(open|refused|silent, words)` (`probe_port`)."""

    def __init__(self, rule: dict[str, Any], host: str | None, started_s: float) -> None:
        self.mode = rule.get("mode", "any")
        self.host = host
        self.first = next((d.get("name") for d in rule.get("deciders", [])), None)
        self.deciders = [d for d in rule.get("deciders", [])
                         if d.get("host") == host or d.get("port")]
        self.start_timeout_s = float(rule.get("start_timeout_s", 180.0))
        self.silence_window_s = float(rule.get("silence_window_s", SILENCE_WINDOW_S))
        self.started_s = started_s
        self.seen_open: set[str] = set()
        self.was_up = False
        self.closed_since: dict[str, float] = {}
        self.silent_since: dict[str, float] = {}
        self.silent_words: dict[str, str] = {}

    def verdict(self, local_ended: dict[str, dict[str, Any]], now_s: float,
                probe: Any) -> str | None:
        if not self.deciders:
            return None
        looks = self._look(probe)
        how = {d["name"]: self._ended(d, local_ended, now_s, looks.get(d["name"]))
               for d in self.deciders}
        if self.mode == "group":  # rank 0's end, or any rank's failure (seen on its host)
            failed = [name for name in how if name in local_ended and failed_end(
                local_ended[name])]
            if failed:
                return "; ".join(f"{name} failed ({end_words(local_ended[name])}): the group "
                                 "cannot go on without it" for name in failed)
            how = {self.first: how.get(self.first)}
        ended = all(how.values()) if self.mode == "all" else any(how.values())
        if not ended:
            return None
        gone = [name for name, h in how.items() if h == "ended"]
        silent = [name for name, h in how.items() if h == "silent"]
        causes = [f"{', '.join(gone)} ended"] if gone else []
        if silent:
            causes.append(f"{', '.join(silent)} silent for {self.silence_window_s:g} s "
                          "(no answer from its port)")
        return "; ".join(causes)

    def _look(self, probe: Any) -> dict[str, tuple[str, str]]:
        """Each remote decider's port probed, all at once: a silent one costs the probe's whole
        timeout, and a tick must not take that many times over (every worker of a job with no
        chief, seen from a host cut off from them)."""
        remote = [d for d in self.deciders if d.get("host") != self.host]
        if len(remote) <= 1:
            return {d["name"]: probe(d["address"], int(d["port"])) for d in remote}
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(max_workers=min(len(remote), PROBES_AT_ONCE)) as pool:
            asked = {d["name"]: pool.submit(probe, d["address"], int(d["port"])) for d in remote}
        return {name: future.result() for name, future in asked.items()}

    def _ended(self, decider: dict[str, Any], local_ended: dict[str, dict[str, Any]],
               now_s: float, look: tuple[str, str] | None) -> str | None:
        """`ended`, `silent` (for longer than the silence window), or None: not ended."""
        name = decider["name"]
        if decider.get("host") == self.host or look is None:
            return "ended" if name in local_ended else None
        outcome, words = look
        if outcome == OPEN:
            self.seen_open.add(name)
            self.closed_since.pop(name, None)
            self.silent_since.pop(name, None)
            return None
        starting = not (name in self.seen_open or self.was_up) and \
            now_s - self.started_s < self.start_timeout_s  # `up` is still waiting for it
        if outcome != REFUSED:  # silence: says nothing of the task, only of the way to it
            since = self.silent_since.setdefault(name, now_s)
            self.silent_words[name] = words
            if starting or now_s - since < self.silence_window_s:
                return None
            return "silent"
        self.silent_since.pop(name, None)
        since = self.closed_since.setdefault(name, now_s)
        if starting:
            return None
        limit = float(decider.get("closed_for_good_s", CLOSED_FOR_GOOD_S))
        return "ended" if now_s - since >= limit else None

    def silences(self) -> dict[str, dict[str, Any]]:
        """Each decider this host cannot hear from now: where it is, since when, and why."""
        out = {}
        for decider in self.deciders:
            name = decider["name"]
            if name in self.silent_since:
                out[name] = {"task": name, "host": decider.get("host"),
                             "address": decider.get("address"), "port": decider.get("port"),
                             "since": self.silent_since[name],
                             "why": self.silent_words.get(name, ""),
                             "window_s": self.silence_window_s}
        return out


class SilenceRecord:
    """The watcher's silences as the status operation reads them (`silence.json`, present only
    while some decider is silent) and as history (`silence`/`heard` events)."""

    def __init__(self, run_dir: str, events: EventLog) -> None:
        self.path = os.path.join(run_dir, SILENCE_FILE)
        self.events = events
        self.said: dict[str, dict[str, Any]] = {}
        clear_silence(run_dir)

    def update(self, silences: dict[str, dict[str, Any]]) -> None:
        if {n: s["since"] for n, s in silences.items()} == \
                {n: s["since"] for n, s in self.said.items()}:
            return
        for name, silence in silences.items():
            if name not in self.said or self.said[name]["since"] != silence["since"]:
                self.events.write({"event": "silence", "peer": name, "since": silence["since"],
                                   "why": silence["why"]})
        for name, silence in self.said.items():
            if name not in silences:
                self.events.write({"event": "heard", "peer": name,
                                   "silent_s": round(time.time() - silence["since"], 1)})
        self.said = dict(silences)
        if silences:
            try:
                write_json(self.path, {"silences": sorted(silences.values(),
                                                          key=lambda s: str(s["task"]))})
            except OSError as exc:  # no room: status says the records stopped instead
                space_of(os.path.dirname(self.path)).failed(exc, SILENCE_FILE)
        else:
            clear_silence(os.path.dirname(self.path))


def clear_silence(run_dir: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(os.path.join(run_dir, SILENCE_FILE))


def failed_end(record: dict[str, Any]) -> bool:
    """An exit record of a task that failed: a status other than 0, or a signal."""
    return bool(record.get("signal")) or record.get("exit_code") not in (0, None)


def end_words(record: dict[str, Any]) -> str:
    """`exit 3`, `killed by SIGKILL`: how a task ended, from its exit record."""
    return f"killed by {record['signal']}" if record.get("signal") else \
        f"exit {record.get('exit_code')}"


def decider_exit_code(run_dir: str, manifest: dict[str, Any]) -> int | None:
    """The exit status of a task of this host whose end was the job's (128+n for a signal):
    the first such task's; in a group (mode `group`), the first that failed, if any did."""
    codes = []
    for decider in manifest["end"].get("deciders", []):
        if decider.get("host") != manifest.get("host"):
            continue
        record = read_json(task_file(run_dir, decider["name"], ".exit.json")) or {}
        if record.get("exit_code") is not None:
            codes.append(int(record["exit_code"]))
        elif record.get("signal"):
            codes.append(137 if record["signal"] == "SIGKILL" else 143)
    if manifest["end"].get("mode") == "group":
        return next((code for code in codes if code != 0), codes[0] if codes else None)
    return codes[0] if codes else None


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
    finished = {"status": {"state": "finished", "cause": cause, "exit_code": exit_code,
                           "by": f"watcher on {manifest.get('host')}"}, "finished_at": now()}
    recorded = os.path.exists(path)
    if not recorded:
        try:
            write_json(path, finished)
            recorded = True
        except OSError as exc:  # no room (a full disk): the tasks are stopped all the same
            space_of(run_dir).failed(exc, "finished.json")
    _stop_where(run_dir, run_id, [t["name"] for t in tasks if t["type"] in serving])
    workers = [t["name"] for t in tasks if t["type"] in ("worker", "chief", "evaluator")
               and t["type"] not in serving]
    if not (rule.get("mode") == "group" and exit_code not in (0, None)):
        _wait_for(run_dir, workers, WORKER_GRACE_S)  # (a group that failed is stopped at once)
    _stop_where(run_dir, run_id, workers)
    board = [t["name"] for t in tasks if t["type"] == "tensorboard"]
    tensorboard = rule.get("tensorboard") or {}
    if board and not tensorboard.get("keep"):
        _wait_for(run_dir, board, float(tensorboard.get("grace_s", 300.0)))
        _stop_where(run_dir, run_id, board)
    rest = [n for n in names if n not in board or not tensorboard.get("keep")]
    _stop_where(run_dir, run_id, rest)
    if not recorded:  # the end, once there is room: status and `runs` read it
        write_json_when_room(path, finished)


def _stop_where(run_dir: str, run_id: str, names: list[str]) -> None:
    alive = [n for n in names if read_json(task_file(run_dir, n, ".exit.json")) is None]
    if alive:
        stop_tasks(run_dir, run_id, alive, STOP_GRACE_S)


def _wait_for(run_dir: str, names: list[str], seconds: float) -> None:
    deadline = time.time() + seconds
    while time.time() < deadline and len(local_ends(run_dir, names)) < len(names):
        time.sleep(WATCH_TICK_S)
