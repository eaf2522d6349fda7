"""The dashboard's sources, run once for every browser tab: `tfctl ui --web`'s hub.

textual-serve runs one dashboard process per tab (server.py). Were each to read the hosts
itself, every tab would cost every host its own SSH connection, its own agent sessions and its
own nvidia-smi stream, and its polls would be the hosts' again. So the server runs ONE set of
the sources `tfctl ui` runs in a terminal (a `RunController` over its own connections, its
`GpuWatch`: the nvidia-smi stream, the GPUs' owners, the findings; the TensorBoard tunnel),
polls them on ONE dashboard's schedule (`_Polls`), and each tab's process reads what it last
read through this hub, over a Unix socket of the user's (hubwire.py). The hosts see one
dashboard whatever the number of tabs: a second tab, or a tenth, costs them nothing new.

- **The polls are the hub's**, as a terminal dashboard's workers make them (tui/app/workers.py):
  the run every `RUN_RECHECK_S`, each of its hosts' tasks `task_refresh_s` after the last read
  of that host ended (one thread per host: a dead host delays nobody), its logs every
  `log_refresh_s` from the hosts that answer, the findings (the GPUs' owners read again) every
  `task_refresh_s`. A tab's poll is answered with the last read (hubreads.py's
  `SharedReads.latest`); only
  one asked before any read, or after an action, waits for a read.
- **One log follower per run** (hubreads.py's `LogFeed`): its lines are kept, numbered, and
  each tab reads those after the last it has.
- **The GPUs' samples and owners** are the watch's, in memory.
- **What a user asks for** (the lab, the past runs, the end of a run's status) is read when a
  tab asks, shared by the tabs asking within `FRESH_FRACTION` of a task refresh.
- **Actions** (up, down, sync, restart) run here too, on the same controller and connections,
  as in the terminal: one at a time for all tabs (a second is refused, naming the one under
  way); after one, every poll is made again at once.
- **While no tab reads**, nothing runs on the hosts: the sources start with the first call
  and end `LINGER_S` after the last (a page reloaded finds them still open), and when the
  server ends.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from tfctl.remote.errors import HostUnreachable
from tfctl.remote.gpus.owners import owner_lookup
from tfctl.tui.web import hubcalls, hubwire
from tfctl.tui.web.hubcalls import Hello, answering
from tfctl.tui.web.hubreads import LogFeed, LogNews, SharedReads, TelemetryNews, samples_since
from tfctl.tui.web.hubwire import CALL, EVENT, RAISED, RESULT

if TYPE_CHECKING:
    from tfctl.inventory.model import Inventory
    from tfctl.remote.connect.transport import SshOptions
    from tfctl.remote.controller import DownSummary, RunController, UpOptions
    from tfctl.remote.gpus.findings import Finding
    from tfctl.remote.history.listing import RunSummary
    from tfctl.remote.lab.view import HostLab
    from tfctl.remote.runs.current import CurrentRun
    from tfctl.remote.runs.relaunch import RestartResult
    from tfctl.remote.runs.status import RunStatus, TaskStatus
    from tfctl.remote.sync.result import SyncResult

T = TypeVar("T")

FRESH_FRACTION = 0.8
"""What a user asks for (the lab, the past runs) is read again unless a read of it began less
than this part of a task refresh ago: tabs asking at once share one read."""
RUN_RECHECK_S = 10.0
"""How often the dashboard looks for a run started elsewhere (its workers' RUN_RECHECK_S)."""
LOG_REFRESH_S = 1.0
NOT_IN_RUN_S = 0.5
"""How often a host's poll looks whether the run is known yet and has tasks there (no read
of the host: the run's own poll finds it)."""
LINGER_S = 30.0
"""How long the sources stay up after the last tab's last call."""
Reporter = Callable[["RunController", str], str]


class HubBusy(RuntimeError):
    """Another tab's action is under way (the hub runs one at a time)."""


class _Polls:
    """The hub's polls (see the module): threads, until `stop`; `nudge` makes every poll now."""

    def __init__(self, live: _Live, task_refresh_s: float, log_refresh_s: float,
                 run_recheck_s: float) -> None:
        self.live = live
        self.task_refresh_s = task_refresh_s
        self.log_refresh_s = log_refresh_s
        self.run_recheck_s = run_recheck_s
        self._turn = 0
        self._stopped = False
        self._changed = threading.Condition()
        hosts = [h.name for h in live.controller.inventory.hosts]
        loops: list[tuple[str, Callable[[], float]]] = [
            ("run", self._run), ("logs", self._logs), ("findings", self._findings)]
        loops += [(f"tasks {h}", partial(self._host, h)) for h in hosts]
        for name, once in loops:
            threading.Thread(target=self._loop, args=(once,), name=f"hub {name}",
                             daemon=True).start()

    def nudge(self) -> None:
        with self._changed:
            self._turn += 1
            self._changed.notify_all()

    def stop(self) -> None:
        with self._changed:
            self._stopped = True
            self._changed.notify_all()

    def _loop(self, once: Callable[[], float]) -> None:
        while True:
            with self._changed:
                if self._stopped:
                    return
                turn = self._turn
            try:
                wait_s = once()
            except Exception:  # a tab asking the same read meets it; the poll goes on
                wait_s = self.task_refresh_s
            with self._changed:
                self._changed.wait_for(partial(self._woken, turn), wait_s)

    def _woken(self, turn: int) -> bool:
        return self._stopped or self._turn != turn

    def _run(self) -> float:
        live = self.live
        live.reads.refresh("current", lambda: live.controller.current(refresh=True))
        return self.run_recheck_s

    def _host(self, host: str) -> float:
        live = self.live
        run = live.reads.peek("current")
        if run is None or host not in run.hosts:
            return NOT_IN_RUN_S
        live.reads.refresh(("host_status", host), lambda: live.controller.host_status(host))
        return self.task_refresh_s

    def _logs(self) -> float:
        live = self.live
        run = live.reads.peek("current")
        if run is not None:
            feed = live.feed(run.run_id)
            if feed is not None:
                feed.poll([h for h in run.hosts if not _unreachable(
                    live.reads.failed(("host_status", h)))])
        return self.log_refresh_s

    def _findings(self) -> float:
        self.live.reads.refresh("findings", self.live.watch)
        return self.task_refresh_s


def _unreachable(error: BaseException | None) -> bool:
    return isinstance(error, HostUnreachable)


class _Live:
    """The real sources while tabs read them: those `tfctl ui` runs in a terminal, polled."""

    def __init__(self, inventory: Inventory, options: SshOptions, *, task_refresh_s: float,
                 log_refresh_s: float, run_recheck_s: float) -> None:
        from tfctl.remote.controller import RunController

        self.controller = RunController(inventory, options)
        self.watch = self.controller.gpu_watch()
        self.tunnel = self.controller.tensorboard_tunnel()
        self.tunnel_users: set[int] = set()
        self.reads = SharedReads()
        self.feeds: dict[str, LogFeed] = {}
        self.feeds_lock = threading.Lock()
        self.watch.start()
        self.polls = _Polls(self, task_refresh_s, log_refresh_s, run_recheck_s)

    def feed(self, run_id: str) -> LogFeed | None:
        """The run's log feed (made on first use; the previous run's goes)."""
        with self.feeds_lock:
            found = self.feeds.get(run_id)
            if found is None:
                follower = self.controller.log_follower(None)
                if follower is None or getattr(follower, "run_id", run_id) != run_id:
                    return None  # the controller's run is another: the next look finds it
                self.feeds = {run_id: (found := LogFeed(follower))}
            return found

    def close(self) -> None:
        self.polls.stop()
        self.watch.stop()
        if self.tunnel is not None and self.tunnel_users:
            self.tunnel.close()
        self.controller.close()


@dataclass(frozen=True)
class _Caller:
    """Who called: its process (tunnel users are counted by it) and where `up` tells its
    progress."""

    pid: int
    say: Callable[[str], None]


class DashboardHub:
    """The sources of every tab of one `tfctl ui --web` (see the module): `listen()`, then give
    each tab's process `path`; `close()` when the server ends."""

    def __init__(self, inventory: Inventory, options: SshOptions, *,
                 task_refresh_s: float = 2.0, log_refresh_s: float = LOG_REFRESH_S,
                 run_recheck_s: float = RUN_RECHECK_S, report: Reporter | None = None,
                 linger_s: float = LINGER_S) -> None:
        self.inventory = inventory
        self.options = options
        self.task_refresh_s = task_refresh_s
        self.log_refresh_s = log_refresh_s
        self.run_recheck_s = run_recheck_s
        self.asked_fresh_s = FRESH_FRACTION * task_refresh_s
        self.report = report
        self.linger_s = linger_s
        self.path: Path | None = None
        self._server: socket.socket | None = None
        self._live: _Live | None = None
        self._lock = threading.Lock()
        self._calls = 0
        self._last_call_s = time.monotonic()
        self._acting: str | None = None
        self._act_lock = threading.Lock()
        self._report_lock = threading.Lock()
        self._closed = threading.Event()
        self.answers = dict((
            answering(hubcalls.HELLO, self.call_hello),
            answering(hubcalls.CURRENT, self.call_current),
            answering(hubcalls.HOST_STATUS, self.call_host_status),
            answering(hubcalls.FINDINGS, self.call_findings),
            answering(hubcalls.LOGS, self.call_logs),
            answering(hubcalls.TELEMETRY, self.call_telemetry),
            answering(hubcalls.STATUS, self.call_status),
            answering(hubcalls.RUNS, self.call_runs),
            answering(hubcalls.LAB, self.call_lab),
            answering(hubcalls.REPORT, self.call_report),
            answering(hubcalls.TUNNEL_OPEN, self.call_tunnel_open),
            answering(hubcalls.TUNNEL_CLOSE, self.call_tunnel_close),
            answering(hubcalls.UP, self.call_up),
            answering(hubcalls.DOWN, self.call_down),
            answering(hubcalls.SYNC, self.call_sync),
            answering(hubcalls.RESTART_TASK, self.call_restart_task),
            answering(hubcalls.RESTART, self.call_restart),
        ))
        """Each call of hubcalls.py by its name on the wire, with the handler that answers it."""

    # -- the process side ----------------------------------------------------------------------
    def listen(self) -> Path:
        self.path = hubwire.socket_path()
        self._server = hubwire.listen(self.path)
        threading.Thread(target=self._accept, args=(self._server,), name="hub-accept",
                         daemon=True).start()
        threading.Thread(target=self._linger, name="hub-linger", daemon=True).start()
        return self.path

    def close(self) -> None:
        """Stop answering and end the sources: nothing of them is left on the hosts."""
        self._closed.set()
        if self._server is not None:
            with contextlib.suppress(OSError):  # wakes the thread waiting in accept()
                self._server.shutdown(socket.SHUT_RDWR)
            self._server.close()
        if self.path is not None:
            self.path.unlink(missing_ok=True)
        with self._lock:
            live, self._live = self._live, None
        if live is not None:
            live.close()

    def _accept(self, server: socket.socket) -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return  # closed: the server is ending
            if not hubwire.peer_is_us(conn):
                conn.close()
                continue
            threading.Thread(target=self._serve, args=(conn,), name="hub-call",
                             daemon=True).start()

    def _linger(self) -> None:
        while not self._closed.wait(1.0):
            with self._lock:
                idle = self._calls == 0 and time.monotonic() - self._last_call_s > self.linger_s
                live = self._live if idle else None
                if live is not None:
                    self._live = None
            if live is not None:
                live.close()

    def _enter(self) -> _Live:
        with self._lock:
            self._calls += 1
            if self._live is None:
                self._live = _Live(self.inventory, self.options,
                                   task_refresh_s=self.task_refresh_s,
                                   log_refresh_s=self.log_refresh_s,
                                   run_recheck_s=self.run_recheck_s)
            return self._live

    def _leave(self) -> None:
        with self._lock:
            self._calls -= 1
            self._last_call_s = time.monotonic()

    def _serve(self, conn: socket.socket) -> None:
        sending = threading.Lock()  # `up` tells its progress from the fleet's threads

        def answer(kind: bytes, value: object) -> None:
            try:
                data = hubwire.dumps(value)
            except Exception as exc:  # said to the tab, not lost
                kind, data = RAISED, hubwire.dumps(hubwire.HubFailed(
                    f"the dashboard's hub could not send its answer: {type(exc).__name__}: "
                    f"{exc}"))
            with sending:
                hubwire.send_frame(conn, kind, data)

        try:
            kind, (name, args, kwargs) = hubwire.receive(conn)
            method = self.answers.get(name)
            if kind != CALL or method is None:
                return
            caller = _Caller(hubwire.peer_pid(conn), lambda text: answer(EVENT, text))
            try:
                live = self._enter()
            except Exception as exc:  # the sources could not start: said
                answer(RAISED, exc)
                return
            try:
                value = method(live, caller, *args, **kwargs)
            except Exception as exc:  # the tab's dashboard shows it
                answer(RAISED, exc)
            else:
                answer(RESULT, value)
            finally:
                self._leave()
        except (EOFError, OSError, ValueError, TypeError):
            pass  # the tab went (its process ended mid-call)
        finally:
            conn.close()

    # -- the calls (hubcalls.py: what hubsources.py asks for, `answers` says which answers) ---
    def call_hello(self, live: _Live, caller: _Caller) -> Hello:
        c = live.controller
        return Hello(c.inventory, c.plan, live.tunnel is not None, self.report is not None)

    # The polls' reads: the hub keeps them fresh (`_Polls`); `refresh` asks for the run the
    # tab's workers look for every RUN_RECHECK_S, which the hub's own poll reads as often.
    def call_current(self, live: _Live, caller: _Caller, refresh: bool = False
                     ) -> CurrentRun | None:
        return live.reads.latest("current", lambda: live.controller.current(refresh=True))

    def call_host_status(self, live: _Live, caller: _Caller, host: str
                         ) -> tuple[TaskStatus, ...]:
        return live.reads.latest(("host_status", host),
                                 lambda: live.controller.host_status(host))

    def call_findings(self, live: _Live, caller: _Caller) -> Sequence[Finding]:
        return live.reads.latest("findings", live.watch)

    def call_logs(self, live: _Live, caller: _Caller, run_id: str, cursor: int | None
                  ) -> LogNews:
        feed = live.feed(run_id)
        if feed is None:
            return LogNews([], {}, 0 if cursor is None else cursor)
        return feed.since(cursor)

    # What a user asks for: read when asked, shared by the tabs asking together.
    def call_status(self, live: _Live, caller: _Caller) -> RunStatus | None:
        return live.reads.fresh("status", self.asked_fresh_s, live.controller.status)

    def call_runs(self, live: _Live, caller: _Caller) -> Sequence[RunSummary]:
        return live.reads.fresh("runs", self.asked_fresh_s, live.controller.runs)

    def call_lab(self, live: _Live, caller: _Caller) -> Sequence[HostLab]:
        return live.reads.fresh("lab", self.asked_fresh_s, live.controller.lab)

    def call_telemetry(self, live: _Live, caller: _Caller, since_s: float | None
                       ) -> TelemetryNews:
        """The GPUs as the watch last saw them, and every sample from `since_s` on (None:
        every sample kept, for a tab's first look)."""
        watch = live.watch
        snapshots = dict(watch.snapshots())
        label = owner_lookup(watch.owners(snapshots))
        owners = {(host, gpu.uuid): label(host, gpu.uuid)
                  for host, snap in snapshots.items() for gpu in snap.gpus}
        return TelemetryNews(snapshots, owners, samples_since(watch.streams.history, since_s))

    def call_report(self, live: _Live, caller: _Caller, run_id: str) -> str:
        if self.report is None:
            raise HubBusy("reports are not offered here")
        with self._report_lock:  # matplotlib draws one figure at a time
            return self.report(live.controller, run_id)

    def call_tunnel_open(self, live: _Live, caller: _Caller) -> tuple[str, str | None]:
        tunnel = live.tunnel
        if tunnel is None:
            raise HubBusy("this job has no TensorBoard (job.tensorboard)")
        url = tunnel.open()  # the same tunnel for every tab
        live.tunnel_users.add(caller.pid)
        return url, tunnel.port_note

    def call_tunnel_close(self, live: _Live, caller: _Caller) -> None:
        live.tunnel_users.discard(caller.pid)
        if live.tunnel is not None and not live.tunnel_users:
            live.tunnel.close()

    # -- actions: one at a time, then every shared read anew ----------------------------------
    def _act(self, live: _Live, action: str, work: Callable[[], T]) -> T:
        with self._act_lock:
            if self._acting is not None:
                raise HubBusy(f"another tab's “{self._acting}” is under way; try again when it "
                              "has finished")
            self._acting = action
        try:
            return work()
        finally:
            live.reads.clear()
            live.polls.nudge()
            with self._act_lock:
                self._acting = None

    def call_up(self, live: _Live, caller: _Caller, options: UpOptions) -> str:
        return self._act(live, "up", lambda: live.controller.up(options, caller.say))

    def call_down(self, live: _Live, caller: _Caller, grace_s: float) -> DownSummary:
        return self._act(live, "down", lambda: live.controller.down(grace_s))

    def call_sync(self, live: _Live, caller: _Caller) -> Mapping[str, SyncResult]:
        return self._act(live, "sync", live.controller.sync)

    def call_restart_task(self, live: _Live, caller: _Caller, task: str) -> None:
        self._act(live, "restart", lambda: live.controller.restart_task(task))

    def call_restart(self, live: _Live, caller: _Caller, target: str,
                     wait_s: float | None) -> RestartResult:
        return self._act(live, "restart", lambda: live.controller.restart(target, wait_s))
