"""The calls a browser tab's dashboard makes on the hub, declared once: each one's name on the
wire, what it takes and what it answers.

A tab's sources (hubsources.py) call them (`HubClient.call(CURRENT, refresh)`, typed by the
call), the hub (hub.py) answers each with the handler it names for it (`answering`, checked
against the call's types), and `CALLS` is every one of them. What the dashboard asks of its
sources in a terminal is the same set (tui/app/sources.py: `RunControl`, `TelemetrySource`,
`Tunnel`, `FindingsSource`): `RUN_CONTROL` maps each of `RunControl`'s members to its call
here, or to None where the tab answers it itself, so that a member added to the Protocol
without a call is a failing test (tests/web/test_hub.py), not a tab that breaks.

The wire is hubwire.py's: a call is sent as its `name`, the arguments and no keywords.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Concatenate, Generic, ParamSpec, TypeVar

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
    from tfctl.tui.web.hubreads import LogNews, TelemetryNews

P = ParamSpec("P")
R = TypeVar("R")
Live = TypeVar("Live")
Caller = TypeVar("Caller")


@dataclass(frozen=True)
class HubCall(Generic[P, R]):
    """One call on the hub: its arguments are `P`, its answer `R`."""

    name: str


@dataclass(frozen=True)
class Hello:
    """What a tab's dashboard is built from: the inventory and plan it shows, and what it may
    offer (`t`: a TensorBoard tunnel; `h`, Enter: a report)."""

    inventory: Inventory
    plan: Plan
    tunnel: bool
    reports: bool


HELLO: HubCall[[], Hello] = HubCall("hello")
"""What the tab's dashboard is built from (once, when the tab opens)."""

# The polls' reads: the hub keeps them fresh.
CURRENT: HubCall[[bool], CurrentRun | None] = HubCall("current")
HOST_STATUS: HubCall[[str], tuple[TaskStatus, ...]] = HubCall("host_status")
FINDINGS: HubCall[[], Sequence[Finding]] = HubCall("findings")
LOGS: HubCall[[str, int | None], LogNews] = HubCall("logs")
"""A run's lines after the tab's cursor (None: from the first the hub kept)."""
TELEMETRY: HubCall[[float | None], TelemetryNews] = HubCall("telemetry")
"""The GPUs as last seen, and every sample from a time on (None: every sample kept)."""

# What a user asks for: read when asked.
STATUS: HubCall[[], RunStatus | None] = HubCall("status")
RUNS: HubCall[[], Sequence[RunSummary]] = HubCall("runs")
LAB: HubCall[[], Sequence[HostLab]] = HubCall("lab")
REPORT: HubCall[[str], str] = HubCall("report")
"""The report page written for a run (a file of this machine)."""
TUNNEL_OPEN: HubCall[[], tuple[str, str | None]] = HubCall("tunnel_open")
"""The tunnel's local URL, and why its port is another than asked (or None)."""
TUNNEL_CLOSE: HubCall[[], None] = HubCall("tunnel_close")

# The actions: one at a time for every tab.
UP: HubCall[[UpOptions], str] = HubCall("up")
"""The run's id; its progress is told on the way (`HubClient.call`'s `on_event`)."""
DOWN: HubCall[[float], DownSummary] = HubCall("down")
SYNC: HubCall[[], Mapping[str, SyncResult]] = HubCall("sync")
RESTART_TASK: HubCall[[str], None] = HubCall("restart_task")
RESTART: HubCall[[str, float | None], RestartResult] = HubCall("restart")

CALLS: tuple[HubCall[Any, Any], ...] = (
    HELLO, CURRENT, HOST_STATUS, FINDINGS, LOGS, TELEMETRY, STATUS, RUNS, LAB, REPORT,
    TUNNEL_OPEN, TUNNEL_CLOSE, UP, DOWN, SYNC, RESTART_TASK, RESTART)
"""Every call a tab may make; the hub answers no other name."""

RUN_CONTROL: Mapping[str, HubCall[Any, Any] | None] = {
    "current": CURRENT, "status": STATUS, "host_status": HOST_STATUS, "log_follower": LOGS,
    "sync": SYNC, "up": UP, "down": DOWN, "restart_task": RESTART_TASK, "restart": RESTART,
    "runs": RUNS, "lab": LAB, "close": None}
"""`RunControl`'s members (tui/app/sources.py), each with the call that answers it in a tab
(None: the tab's own, `close` has nothing of the hub's to close)."""

def answering(call: HubCall[P, R], handler: Callable[Concatenate[Live, Caller, P], R]
              ) -> tuple[str, Callable[..., Any]]:
    """`call`'s name and the hub's handler for it (given the tab's sources and who called,
    then the call's arguments), its types checked against the call's."""
    return call.name, handler
