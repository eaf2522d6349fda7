"""The dashboard's thread workers: every blocking call, and the rules for when to make it.

Rules: one worker per host poll; a host's next poll is scheduled only when its last one has
finished (one pending timer per host, so extra pokes never double the rate); logs and findings
follow the same rule; actions run one at a time. Workers never touch widgets: they post the
past-tense messages of `messages.py`. Every failure becomes a message with its concrete cause.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, TypeVar

from textual.timer import Timer

from tfctl.remote.errors import RemoteError
from tfctl.tui.app import messages as msg
from tfctl.tui.app.sources import Finding, LogFollowerLike

if TYPE_CHECKING:
    from tfctl.tui.app.app import TfctlApp

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


class Workers:
    def __init__(self, app: TfctlApp) -> None:
        self.app = app
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
        self._timers[key] = self.app.set_timer(delay_s, then, name=key)

    def _cancel(self, key: str) -> None:
        old = self._timers.pop(key, None)
        if old is not None:
            old.stop()

    def _thread(self, name: str, group: str, fn: Callable[[], None]) -> None:
        self.app.run_worker(fn, name=name, group=group, thread=True, exit_on_error=False)

    # -- which run ------------------------------------------------------------------------------
    def find_run(self, refresh: bool = False) -> None:
        self._cancel("run")
        controller = self.app.controller

        def read() -> None:
            try:
                run = controller.current(refresh=refresh)
            except Exception as exc:  # any failure is shown, and the next check still comes
                self.app.post_message(msg.ActionFailed("run", "Finding the run failed",
                                                       describe_error(exc)))
                run = None
            self.app.post_message(msg.RunFound(run))

        self._thread("find run", "run", read)
        self._later("run", RUN_RECHECK_S, lambda: self.find_run(refresh=True))

    # -- per-host task polls --------------------------------------------------------------------
    def poll_host(self, host: str) -> None:
        if host in self._polling or host not in self.app.board.run_hosts:
            return
        self._cancel(f"poll:{host}")
        self._polling.add(host)
        app = self.app
        app.board.poll_started(host, app.clock())

        def poll() -> None:
            try:
                tasks = app.controller.host_status(host)
            except RemoteError as exc:
                app.post_message(msg.HostPollFailed(host, exc.what, exc.kind, app.clock()))
            except Exception as exc:  # a bug or an OS error: the host shows it, polling goes on
                app.post_message(msg.HostPollFailed(host, describe_error(exc), "failed",
                                                    app.clock()))
            else:
                app.post_message(msg.HostPolled(host, tuple(tasks), app.clock()))

        self._thread(f"poll {host}", f"poll:{host}", poll)

    def poll_done(self, host: str) -> None:
        self._polling.discard(host)
        if host in self.app.board.run_hosts:
            self._later(f"poll:{host}", self.app.task_refresh_s, lambda: self.poll_host(host))

    # -- logs -----------------------------------------------------------------------------------
    def forget_logs(self) -> None:
        self._follower = None
        self._follower_run = None

    def poll_logs(self) -> None:
        run_id = self.app.board.run_id
        if run_id is None or self._logs_busy:
            return
        self._cancel("logs")
        self._logs_busy = True
        board = self.app.board
        reachable = [h for h in board.run_hosts if board.link(h).error_kind != "unreachable"]
        first = self._follower_run != run_id

        def poll() -> None:
            try:
                if first:
                    self._follower = self.app.controller.log_follower(None)
                    self._follower_run = run_id
                follower = self._follower
                if follower is None:
                    self.app.post_message(msg.LogLinesArrived(run_id, [], {}))
                    return
                # Skip hosts known to be down: the host poll says when they are back.
                follower.hosts = reachable
                batch = follower.poll(tail_lines=FIRST_TAIL_LINES if first else None)
                self.app.post_message(msg.LogLinesArrived(run_id, list(batch.lines),
                                                          dict(batch.errors)))
            except Exception as exc:
                self.app.post_message(msg.LogLinesArrived(run_id, [], {"": describe_error(exc)}))

        self._thread("logs", "logs", poll)

    def logs_done(self) -> None:
        self._logs_busy = False
        self._later("logs", self.app.log_refresh_s, self.poll_logs)

    # -- findings and the end of the job ---------------------------------------------------------
    def poll_findings(self) -> None:
        source = self.app.findings_source
        if source is None or self._findings_busy:
            return
        self._findings_busy = True

        def read() -> None:
            try:
                found = list(source())
            except Exception as exc:
                found = [Finding("error", f"findings could not be computed: "
                                          f"{describe_error(exc)}")]
            self.app.post_message(msg.FindingsRead(found))

        self._thread("findings", "findings", read)

    def findings_done(self) -> None:
        self._findings_busy = False
        self._later("findings", self.app.task_refresh_s, self.poll_findings)

    def read_run_status(self) -> None:
        app = self.app

        def read() -> None:
            try:
                status = app.controller.status()
            except Exception as exc:
                app.post_message(msg.ActionFailed("status", "Closing the finished run failed",
                                                  describe_error(exc)))
                return
            app.post_message(msg.RunStatusRead(status, app.clock()))

        self._thread("run status", "status", read)

    # -- actions, one at a time -----------------------------------------------------------------
    def act(self, action: str, title: str, work: Work) -> None:
        app = self.app
        if app.busy is not None:
            app.notify(f"“{app.busy}” is still running; try again when it has finished.",
                       title="Busy", severity="warning")
            return
        app.busy = action
        app.tick()  # the header says what is running, at once

        def run() -> None:
            try:
                words, result = work()
            except Exception as exc:  # shown to the user with its cause, never swallowed
                app.post_message(msg.ActionFailed(action, f"{title} failed", describe_error(exc)))
                return
            app.post_message(msg.ActionSucceeded(action, title, words, result))

        self._thread(action, "action", run)

    def do_up(self) -> tuple[str, object]:
        def say(text: str) -> None:
            self.app.post_message(msg.ActionProgressed("up", text))

        run_id = self.app.controller.up(say)
        return f"Started run {run_id}.", run_id

    def do_down(self) -> tuple[str, object]:
        summary = self.app.controller.down(grace_s=10.0)
        return msg.down_words(summary), summary

    def do_sync(self) -> tuple[str, object]:
        results = self.app.controller.sync()
        parts = []
        for host, result in results.items():
            files = getattr(result, "files_transferred", None)
            parts.append(f"{host} ({files} files)" if files is not None else host)
        return f"Synced the code to {len(parts)} host(s): {', '.join(parts)}.", results

    def do_restart(self, task: str) -> tuple[str, object]:
        self.app.controller.restart_task(task)
        return f"Restarted {task}.", task

    def do_tunnel(self, open_it: bool) -> tuple[str, object]:
        tunnel = self.app.tunnel
        assert tunnel is not None
        if open_it:
            url = tunnel.open()
            note = getattr(tunnel, "port_note", None)  # "local port 6006 is taken, so …"
            return f"TensorBoard is at {url}" + (f" ({note})" if note else ""), url
        tunnel.close()
        return "Closed the TensorBoard tunnel.", None
