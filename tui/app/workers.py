"""The dashboard's thread workers: every blocking call, and the rules for when to make it.

Rules: one worker per host poll; a host's next poll is scheduled only when its last one has
finished (one pending timer per host, so extra pokes never double the rate); logs and findings
follow the same rule; actions run one at a time (the app checks that before `act`). Workers never
touch widgets: they post the past-tense messages of `messages.py` to their `MessageTarget` (the
app). Every failure becomes a message with its concrete cause.

`Workers` gets what it reads and drives as constructor arguments (the controller, the board, the
refresh periods, the findings source and tunnel), never the app itself: this module does not
import `app.py`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Protocol, TypeVar

from textual.message import Message
from textual.timer import Timer

from tfctl.remote.controller import UpOptions
from tfctl.remote.errors import GpusBusy, RemoteError
from tfctl.tui.app import messages as msg
from tfctl.tui.app.model.board import Board
from tfctl.tui.app.sources import (
    AppFinding,
    FindingsSource,
    LogFollowerLike,
    RunControl,
    Tunnel,
)

RUN_RECHECK_S = 10.0  # how often to look for a run started elsewhere (`tfctl up` in a shell)
FIRST_TAIL_LINES = 200
Work = Callable[[], tuple[str, object]]


T = TypeVar("T")


class ThreadPerCall(ThreadPoolExecutor):
    """The executor Textual's thread workers run on: one daemon thread per call.

    Why not asyncio's default pool: it has min(32, cores + 4) threads (6 here), so a few dead
    hosts, each holding a thread for its connect timeout, would delay every other host's poll;
    and at exit it waits for every call in flight, so `q` would hang behind an SSH timeout or a
    long `up`. Daemon threads end with the process (the app asks before quitting mid-action).
    A ThreadPoolExecutor only in name (asyncio accepts no other as the default); its pool is
    never used.
    """

    def submit(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> Future[T]:
        future: Future[T] = Future()

        def run() -> None:
            if not future.set_running_or_notify_cancel():
                return
            try:
                result = fn(*args, **kwargs)
            except BaseException as exc:  # handed to the awaiting worker, which reports it
                future.set_exception(exc)
            else:
                future.set_result(result)

        threading.Thread(target=run, name=getattr(fn, "__name__", "tfctl-ui"),
                         daemon=True).start()
        return future

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """Nothing to wait for: the threads are daemons (see the class docstring)."""


def describe_error(exc: BaseException) -> str:
    """The concrete cause: a RemoteError's message and output tail, else type and text."""
    if isinstance(exc, RemoteError):
        return exc.full()
    return f"{type(exc).__name__}: {exc}"


class MessageTarget(Protocol):
    """Where workers post and schedule: the Textual app (`post_message` is thread-safe)."""

    def post_message(self, message: Message) -> bool: ...

    def set_timer(self, delay: float, callback: Callable[[], None], *, name: str) -> Timer: ...

    def run_worker(self, work: Callable[[], None], name: str, group: str, *,
                   exit_on_error: bool, thread: bool) -> object: ...


class Workers:
    def __init__(self, target: MessageTarget, controller: RunControl, board: Board, *,
                 clock: Callable[[], float], task_refresh_s: float, log_refresh_s: float,
                 findings: FindingsSource | None = None, tunnel: Tunnel | None = None) -> None:
        self.target = target
        self.post = target.post_message
        self.controller = controller
        self.board = board
        self.clock = clock
        self.task_refresh_s = task_refresh_s
        self.log_refresh_s = log_refresh_s
        self.findings = findings
        self.tunnel = tunnel
        self._polling: set[str] = set()
        self._timers: dict[str, Timer] = {}
        self._follower: LogFollowerLike | None = None
        self._follower_run: str | None = None
        self._logs_busy = False
        self._findings_busy = False

    def _later(self, key: str, delay_s: float, then: Callable[[], None]) -> None:
        old = self._timers.pop(key, None)
        if old is not None:
            old.stop()
        self._timers[key] = self.target.set_timer(delay_s, then, name=key)

    def _cancel(self, key: str) -> None:
        old = self._timers.pop(key, None)
        if old is not None:
            old.stop()

    def _thread(self, name: str, group: str, fn: Callable[[], None]) -> None:
        self.target.run_worker(fn, name, group, thread=True, exit_on_error=False)

    # -- which run ------------------------------------------------------------------------------
    def find_run(self, refresh: bool = False) -> None:
        self._cancel("run")
        controller, post = self.controller, self.post

        def read() -> None:
            try:
                run = controller.current(refresh=refresh)
            except Exception as exc:  # any failure is shown, and the next check still comes
                post(msg.ActionFailed("run", "Finding the run failed", describe_error(exc)))
                run = None
            post(msg.RunFound(run))

        self._thread("find run", "run", read)
        self._later("run", RUN_RECHECK_S, lambda: self.find_run(refresh=True))

    # -- per-host task polls --------------------------------------------------------------------
    def poll_host(self, host: str) -> None:
        if host in self._polling or host not in self.board.run_hosts:
            return
        self._cancel(f"poll:{host}")
        self._polling.add(host)
        controller, post, clock = self.controller, self.post, self.clock
        self.board.poll_started(host, clock())

        def poll() -> None:
            try:
                tasks = controller.host_status(host)
            except RemoteError as exc:
                post(msg.HostPollFailed(host, exc.what, type(exc), clock()))
            except Exception as exc:  # a bug or an OS error: the host shows it, polling goes on
                post(msg.HostPollFailed(host, describe_error(exc), type(exc), clock()))
            else:
                post(msg.HostPolled(host, tuple(tasks), clock()))

        self._thread(f"poll {host}", f"poll:{host}", poll)

    def poll_done(self, host: str) -> None:
        self._polling.discard(host)
        if host in self.board.run_hosts:
            self._later(f"poll:{host}", self.task_refresh_s, lambda: self.poll_host(host))

    # -- logs -----------------------------------------------------------------------------------
    def forget_logs(self) -> None:
        self._follower = None
        self._follower_run = None

    def poll_logs(self) -> None:
        board = self.board
        run_id = board.run_id
        if run_id is None or self._logs_busy:
            return
        self._cancel("logs")
        self._logs_busy = True
        reachable = [h for h in board.run_hosts if not board.link(h).unreachable]
        first = self._follower_run != run_id
        post = self.post

        def poll() -> None:
            try:
                if first:
                    self._follower = self.controller.log_follower(None)
                    self._follower_run = run_id
                follower = self._follower
                if follower is None:
                    post(msg.LogLinesArrived(run_id, [], {}))
                    return
                # Skip hosts known to be down: the host poll says when they are back.
                follower.hosts = reachable
                batch = follower.poll(tail_lines=FIRST_TAIL_LINES if first else None)
                post(msg.LogLinesArrived(run_id, list(batch.lines), dict(batch.errors)))
            except Exception as exc:
                post(msg.LogLinesArrived(run_id, [], {"": describe_error(exc)}))

        self._thread("logs", "logs", poll)

    def logs_done(self) -> None:
        self._logs_busy = False
        self._later("logs", self.log_refresh_s, self.poll_logs)

    # -- findings and the end of the job ---------------------------------------------------------
    def poll_findings(self) -> None:
        source = self.findings
        if source is None or self._findings_busy:
            return
        self._findings_busy = True
        post = self.post

        def read() -> None:
            try:
                found = list(source())
            except Exception as exc:
                found = [AppFinding("error", f"findings could not be computed: "
                                          f"{describe_error(exc)}")]
            post(msg.FindingsRead(found))

        self._thread("findings", "findings", read)

    def findings_done(self) -> None:
        self._findings_busy = False
        self._later("findings", self.task_refresh_s, self.poll_findings)

    def read_run_status(self) -> None:
        controller, post, clock = self.controller, self.post, self.clock

        def read() -> None:
            try:
                status = controller.status()
            except Exception as exc:
                post(msg.ActionFailed("status", "Closing the finished run failed",
                                      describe_error(exc)))
                return
            post(msg.RunStatusRead(status, clock()))

        self._thread("run status", "status", read)

    # -- actions (the app runs one at a time) ---------------------------------------------------
    def act(self, action: str, title: str, work: Work) -> None:
        """Run `work` in a thread; post what came of it. `GpusBusy` (from `up`) is not a
        failure but a question for the user: it becomes `GpusFoundBusy`."""
        post = self.post

        def run() -> None:
            try:
                words, result = work()
            except GpusBusy as busy:
                post(msg.GpusFoundBusy(action, busy.holders, busy.free))
                return
            except Exception as exc:  # shown to the user with its cause, never swallowed
                post(msg.ActionFailed(action, f"{title} failed", describe_error(exc)))
                return
            post(msg.ActionSucceeded(action, title, words, result))

        self._thread(action, "action", run)

    def do_up(self, force: bool = False) -> tuple[str, object]:
        """`up` as `tfctl up [--force]` does it; without `force` it refuses busy GPUs."""
        post = self.post

        def on_event(text: str) -> None:
            post(msg.ActionProgressed("up", text))

        run_id = self.controller.up(UpOptions(force=force), on_event)
        return f"Started run {run_id}.", run_id

    def do_down(self) -> tuple[str, object]:
        summary = self.controller.down(grace_s=10.0)
        return msg.down_words(summary), summary

    def do_sync(self) -> tuple[str, object]:
        results = self.controller.sync()
        parts = [f"{host} ({result.files_transferred} files)" for host, result in results.items()]
        return f"Synced the code to {len(parts)} host(s): {', '.join(parts)}.", results

    def do_restart(self, task: str) -> tuple[str, object]:
        self.controller.restart_task(task)
        return f"Restarted {task}.", task

    def do_restart_lost(self, target: str) -> tuple[str, object]:
        """The lost tasks of a host, or one lost task, started again (`tfctl restart`)."""
        result = self.controller.restart(target)
        said = f"Started {', '.join(result.tasks)} again on {result.host}."
        failed = [n for n, s in result.states.items() if not s.started]
        if failed:
            said += f" {', '.join(failed)} did not start: see the log."
        return said, result

    def do_tunnel(self, open_it: bool) -> tuple[str, object]:
        tunnel = self.tunnel
        assert tunnel is not None
        if open_it:
            url = tunnel.open()
            note = tunnel.port_note
            return f"TensorBoard is at {url}" + (f" ({note})" if note else ""), url
        tunnel.close()
        return "Closed the TensorBoard tunnel.", None
