"""A browser tab's sources: the dashboard's Protocols (tui/app/sources.py) answered by the
server's hub (hub.py) instead of by the hosts.

The tab's process opens no SSH connection and starts nothing on a host: each call is one
request on the hub's Unix socket (hubwire.py), answered from the hub's one set of sources.
The app polls them as it polls a `RunController` in a terminal, on the same schedule; the hub
decides which of those polls reach the hosts.

- `HubControl` is the `RunControl`: reads and actions are the hub's (`up` tells its progress as
  it goes; `GpusBusy` comes back as itself, so the app asks before forcing).
- `HubTelemetry` is the `TelemetrySource` and `OwnerOf`: a thread asks the hub for the GPUs
  every half GPU refresh and keeps their samples in a `GpuHistory` of its own, so `snapshot`,
  `history` and `owner_of` never block.
- `HubTunnel` is the TensorBoard tunnel the hub keeps for every tab.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar

from tfctl.remote.gpus.lastseen import GpuHistory, HostTelemetry
from tfctl.remote.runs.logs import LogBatch
from tfctl.tui.web import hubcalls, hubwire
from tfctl.tui.web.hubcalls import HubCall
from tfctl.tui.web.hubwire import CALL, EVENT, RAISED, RESULT

if TYPE_CHECKING:
    from tfctl.inventory.model import Inventory
    from tfctl.inventory.plan import Plan
    from tfctl.remote.controller import DownSummary, UpOptions
    from tfctl.remote.gpus.findings import Finding
    from tfctl.remote.history.listing import RunSummary
    from tfctl.remote.lab.view import HostLab
    from tfctl.remote.runs.current import CurrentRun
    from tfctl.remote.runs.relaunch import RestartResult
    from tfctl.remote.runs.status import RunStatus, TaskStatus
    from tfctl.remote.sync.result import SyncResult
    from tfctl.tui.web.hubcalls import Hello

P = ParamSpec("P")
R = TypeVar("R")


class HubClient:
    """Calls on the hub at `path`: one connection each, so the app's threads never share one."""

    def __init__(self, path: str | Path) -> None:
        self.path = path

    def call(self, call: HubCall[P, R], *args: P.args, **kwargs: P.kwargs) -> R:
        """The hub's answer to `call` (hubcalls.py), or what it raised. `HubGone` when the
        server has ended."""
        answer: R = self._ask(call.name, args, kwargs, None)
        return answer

    def telling(self, on_event: Callable[[str], None], call: HubCall[P, R], *args: P.args,
                **kwargs: P.kwargs) -> R:
        """`call`, with `on_event` hearing the lines the hub tells on the way (`up`)."""
        answer: R = self._ask(call.name, args, kwargs, on_event)
        return answer

    def _ask(self, name: str, args: tuple[Any, ...], kwargs: Mapping[str, Any],
             on_event: Callable[[str], None] | None) -> Any:
        with hubwire.dial(self.path) as sock:
            hubwire.send(sock, CALL, (name, args, dict(kwargs)))
            while True:
                try:
                    kind, value = hubwire.receive(sock)
                except (EOFError, OSError):
                    raise hubwire.HubGone("the dashboard's server ended before it answered") \
                        from None
                if kind == EVENT:
                    if on_event is not None:
                        on_event(value)
                elif kind == RESULT:
                    return value
                elif kind == RAISED:
                    raise value


class HubLogFollower:
    """`LogFollowerLike`: the run's lines the hub has that this tab has not shown yet. The hub
    reads the logs from the hosts that answer, and takes the first tail itself: `hosts` and
    `tail_lines` are the app's, and not needed."""

    def __init__(self, client: HubClient, run_id: str, hosts: list[str],
                 tasks: set[str] | None) -> None:
        self.client = client
        self.run_id = run_id
        self.hosts = hosts
        self.tasks = tasks
        self.cursor: int | None = None

    def poll(self, tail_lines: int | None = None) -> LogBatch:
        news = self.client.call(hubcalls.LOGS, self.run_id, self.cursor)
        self.cursor = news.cursor
        lines = [(t, line) for t, line in news.lines if self.tasks is None or t in self.tasks]
        return LogBatch(lines, dict(news.errors))


class HubControl:
    """`RunControl` over the hub (see the module); its inventory and plan are the hub's."""

    def __init__(self, client: HubClient, hello: Hello) -> None:
        self.client = client
        self.inventory: Inventory = hello.inventory
        self.plan: Plan = hello.plan

    def current(self, refresh: bool = False) -> CurrentRun | None:
        return self.client.call(hubcalls.CURRENT, refresh)

    def status(self) -> RunStatus | None:
        return self.client.call(hubcalls.STATUS)

    def host_status(self, host: str) -> tuple[TaskStatus, ...]:
        return self.client.call(hubcalls.HOST_STATUS, host)

    def log_follower(self, tasks: set[str] | None = None) -> HubLogFollower | None:
        run = self.current()
        if run is None:
            return None
        return HubLogFollower(self.client, run.run_id, list(run.hosts), tasks)

    def sync(self) -> Mapping[str, SyncResult]:
        return self.client.call(hubcalls.SYNC)

    def up(self, options: UpOptions, on_event: Callable[[str], None]) -> str:
        return self.client.telling(on_event, hubcalls.UP, options)

    def down(self, grace_s: float = 10.0) -> DownSummary:
        return self.client.call(hubcalls.DOWN, grace_s)

    def restart_task(self, task: str) -> None:
        self.client.call(hubcalls.RESTART_TASK, task)

    def restart(self, target: str, wait_s: float | None = None) -> RestartResult:
        return self.client.call(hubcalls.RESTART, target, wait_s)

    def runs(self) -> Sequence[RunSummary]:
        return self.client.call(hubcalls.RUNS)

    def lab(self) -> Sequence[HostLab]:
        return self.client.call(hubcalls.LAB)

    def findings(self) -> Sequence[Finding]:
        """`FindingsSource`: the hub's findings (its watch refreshes the owners for them)."""
        return self.client.call(hubcalls.FINDINGS)

    def report(self, run_id: str) -> str:
        """The report page the hub wrote for `run_id` (this machine's file: the tab's process
        sends it to the browser)."""
        return self.client.call(hubcalls.REPORT, run_id)

    def close(self) -> None:
        """Nothing to close: the connections are the hub's."""


class HubTelemetry:
    """`TelemetrySource` and `OwnerOf` from the hub (see the module)."""

    def __init__(self, client: HubClient, every_s: float) -> None:
        self.client = client
        self.every_s = every_s
        self._history = GpuHistory()
        self._snapshots: dict[str, HostTelemetry] = {}
        self._owners: dict[tuple[str, str], str] = {}
        self._since_s: float | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def history(self) -> GpuHistory:
        return self._history

    def snapshot(self, host: str) -> HostTelemetry:
        return self._snapshots.get(host) or HostTelemetry(host)

    def owner_of(self, host: str, uuid: str) -> str:
        return self._owners.get((host, uuid), "unknown")

    def start(self) -> None:
        if self._thread is None:
            self._stop.clear()
            self._thread = threading.Thread(target=self._follow, name="hub-telemetry",
                                             daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread = None

    def fetch(self) -> None:
        """One look at the hub's GPUs: the snapshots, the owners, the samples not yet kept."""
        news = self.client.call(hubcalls.TELEMETRY, self._since_s)
        history = self._history
        for host, timed in news.samples:
            last = history.latest(host, timed.sample.uuid)
            if last is None or timed.at_s > last.at_s:
                history.record(host, [timed.sample], timed.at_s)
            if self._since_s is None or timed.at_s > self._since_s:
                self._since_s = timed.at_s
        self._snapshots, self._owners = news.snapshots, news.owners

    def _follow(self) -> None:
        while True:
            with contextlib.suppress(hubwire.HubGone):  # the server is ending: this tab's
                self.fetch()  # process ends with it (viewer.py)
            if self._stop.wait(self.every_s):
                return


class HubTunnel:
    """`Tunnel`: the hub's one TensorBoard tunnel, open while a tab wants it."""

    def __init__(self, client: HubClient) -> None:
        self.client = client
        self._note: str | None = None

    def open(self) -> str:
        url, self._note = self.client.call(hubcalls.TUNNEL_OPEN)
        return str(url)

    def close(self) -> None:
        self.client.call(hubcalls.TUNNEL_CLOSE)

    @property
    def port_note(self) -> str | None:
        return self._note


@dataclass(frozen=True)
class HubSources:
    """What a tab's dashboard is made of (`viewer.run_viewer` hands them to `make_app`)."""

    control: HubControl
    telemetry: HubTelemetry
    tunnel: HubTunnel | None
    reports: bool


def connect(path: str | Path, gpu_refresh_s: float) -> HubSources:
    """The hub's sources for one tab; `HubGone` when the server has ended."""
    client = HubClient(path)
    hello = client.call(hubcalls.HELLO)
    return HubSources(HubControl(client, hello),
                      HubTelemetry(client, max(0.1, gpu_refresh_s / 2)),
                      HubTunnel(client) if hello.tunnel else None, hello.reports)
