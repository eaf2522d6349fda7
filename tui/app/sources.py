"""What the dashboard reads and drives, as small structural interfaces (no textual import here).

The app takes these by injection, bundled in `Sources` (`tfctl.tui.app.factory.make_app(controller,
telemetry, ...)` builds it): the real `tfctl.remote.controller.RunController`, a telemetry
hub streaming nvidia-smi, and the fakes in `tests/support/fakes/ui_sources.py` all satisfy them
without importing this module, so the remote floor never depends on the UI floor. Why Protocols
and not base classes: the remote layer must not import `tfctl.tui`, and the fakes should be plain
objects.

Calling rules the app follows (and implementations may rely on):
- `RunControl` methods block (SSH); the app calls them only from thread workers, one action at a
  time, and `host_status` for different hosts concurrently. `up` raises
  `tfctl.remote.errors.GpusBusy` (nothing started) when other processes hold the plan's GPUs and
  `options.force` is False; the app then asks, and calls it again with `force=True`.
- `TelemetrySource.snapshot` and `OwnerOf` are read on the UI thread every GPU refresh: they must
  not block (return the latest known state).
- `FindingsSource` is called from a thread worker; it may take a moment.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, Protocol

if TYPE_CHECKING:
    from tfctl.inventory.model import Inventory
    from tfctl.inventory.plan import Plan
    from tfctl.remote.controller import DownSummary, UpOptions
    from tfctl.remote.gpus.lastseen import GpuHistory, HostTelemetry
    from tfctl.remote.lab.view import HostLab
    from tfctl.remote.runs.current import CurrentRun
    from tfctl.remote.runs.relaunch import RestartResult
    from tfctl.remote.runs.status import RunStatus, TaskStatus
    from tfctl.remote.sync.result import SyncResult

FindingLevel = Literal["error", "warning", "info"]


class LogBatchLike(Protocol):
    """`tfctl.remote.runs.logs.LogBatch`: new (task, line) pairs and per-host read errors."""

    lines: list[tuple[str, str]]
    errors: dict[str, str]


class LogFollowerLike(Protocol):
    """`tfctl.remote.runs.logs.LogFollower`: each poll returns only lines not seen before."""

    hosts: list[str]

    def poll(self, tail_lines: int | None = None) -> LogBatchLike: ...


class RunSummaryLike(Protocol):
    """A past run as `tfctl runs` lists it (`tfctl.remote.history.listing.RunSummary`)."""

    run_id: str
    started_at: float | None
    live: bool
    ended: str | None

    @property
    def duration_s(self) -> float | None: ...


class RunControl(Protocol):
    """The subset of `tfctl.remote.controller.RunController` the dashboard uses."""

    inventory: Inventory
    plan: Plan

    def current(self, refresh: bool = False) -> CurrentRun | None: ...

    def status(self) -> RunStatus | None: ...

    def host_status(self, host: str) -> tuple[TaskStatus, ...]: ...

    def log_follower(self, tasks: set[str] | None = None) -> LogFollowerLike | None: ...

    def sync(self) -> Mapping[str, SyncResult]: ...

    def up(self, options: UpOptions, on_event: Callable[[str], None]) -> str: ...

    def down(self, grace_s: float = 10.0) -> DownSummary: ...

    def restart_task(self, task: str) -> None: ...

    def restart(self, target: str, wait_s: float | None = None) -> RestartResult: ...

    def runs(self) -> Sequence[RunSummaryLike]: ...

    def lab(self) -> Sequence[HostLab]: ...

    def close(self) -> None: ...


class TelemetrySource(Protocol):
    """Live GPU state per host. `snapshot` never blocks: it returns the latest known state
    (with `error` / staleness saying how current it is). `start`/`stop` are called by the app."""

    @property
    def history(self) -> GpuHistory: ...

    def snapshot(self, host: str) -> HostTelemetry: ...

    def start(self) -> None: ...

    def stop(self) -> None: ...


class Tunnel(Protocol):
    """The TensorBoard tunnel: `open()` blocks until it listens and returns the local URL."""

    def open(self) -> str: ...

    def close(self) -> None: ...

    @property
    def port_note(self) -> str | None:
        """Where the tunnel listens on another port than asked, why ("local port 6006 is
        taken, so …"); None otherwise."""


class FindingLike(Protocol):
    """One observation worth a person's attention (from `tfctl.remote.gpus.findings` or a fake).

    `gpu` is the GPU's index or UUID on `host` (None: the whole host or the job); `task`, where
    the finding is about one task, marks that task's row too."""

    @property
    def level(self) -> str: ...

    @property
    def text(self) -> str: ...

    @property
    def host(self) -> str | None: ...

    @property
    def gpu(self) -> int | str | None: ...

    @property
    def task(self) -> str | None: ...


@dataclass(frozen=True)
class AppFinding:
    """A finding the dashboard makes itself (an unreachable host, a failed task), and the
    fakes' (`FindingLike`, as `tfctl.remote.gpus.findings.Finding` is)."""

    level: FindingLevel
    text: str
    host: str | None = None
    gpu: int | str | None = None
    task: str | None = None


OwnerOf = Callable[[str, str], str]
"""owner_of(host, gpu_uuid) -> "worker:3" | "foreign pid 4242 user bob" | "idle"; non-blocking."""

FindingsSource = Callable[[], Sequence[FindingLike]]


@dataclass(frozen=True)
class Sources:
    """Everything the dashboard reads and drives, as injected (`factory.make_app` builds one)."""

    controller: RunControl
    telemetry: TelemetrySource | None = None
    owners: OwnerOf | None = None
    findings: FindingsSource | None = None
    tunnel: Tunnel | None = None
    reporter: Callable[[str], str] | None = None
    """Run id → its written report page (`h`, Enter); None: reports are not offered."""
    opener: Callable[[str], object] | None = None
    """Shows a written page (the browser by default)."""
    shell: Callable[[str], int] | None = None
    """`x`: a session on a host or task name, on the terminal the app hands over; its exit
    status (`tfctl ssh`); None: not offered."""


@dataclass(frozen=True)
class Timing:
    """How often the dashboard redraws and polls, and its clocks (fixed ones in tests)."""

    gpu_refresh_s: float = 1.0
    task_refresh_s: float = 2.0
    log_refresh_s: float = 1.0
    clock: Callable[[], float] = time.time
    monotonic: Callable[[], float] = time.monotonic
