"""What the dashboard reads and drives, as small structural interfaces (no textual import here).

The app takes these by injection (`TfctlApp(inventory, controller, telemetry, ...)`): the real
`tfctl.remote.runs.controller.RunController`, a telemetry hub streaming nvidia-smi, and the fakes in
`tests/fakes/ui_sources.py` all satisfy them without importing this module, so the remote floor
never depends on the UI floor. Why Protocols and not base classes: the remote layer must not
import `tfctl.tui`, and the fakes should be plain objects.

Calling rules the app follows (and implementations may rely on):
- `RunControl` methods block (SSH); the app calls them only from thread workers, one action at a
  time, and `host_status` for different hosts concurrently.
- `TelemetrySource.snapshot` and `OwnerOf` are read on the UI thread every GPU refresh: they must
  not block (return the latest known state).
- `FindingsSource` is called from a thread worker; it may take a moment.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, Protocol

if TYPE_CHECKING:
    from tfctl.inventory.model import Inventory
    from tfctl.inventory.plan import Plan
    from tfctl.remote.gpus.history import GpuHistory, HostTelemetry
    from tfctl.remote.runs.controller import DownSummary
    from tfctl.remote.runs.current import CurrentRun
    from tfctl.remote.runs.status import RunStatus, TaskStatus

FindingLevel = Literal["error", "warning", "info"]


class LogBatchLike(Protocol):
    """`tfctl.remote.runs.logs.LogBatch`: new (task, line) pairs and per-host read errors."""

    lines: list[tuple[str, str]]
    errors: dict[str, str]


class LogFollowerLike(Protocol):
    """`tfctl.remote.runs.logs.LogFollower`: each poll returns only lines not seen before."""

    hosts: list[str]

    def poll(self, tail_lines: int | None = None) -> LogBatchLike: ...


class RunControl(Protocol):
    """The subset of `tfctl.remote.runs.controller.RunController` the dashboard uses."""

    inventory: Inventory
    plan: Plan

    def current(self, refresh: bool = False) -> CurrentRun | None: ...

    def status(self) -> RunStatus | None: ...

    def host_status(self, host: str) -> tuple[TaskStatus, ...]: ...

    def log_follower(self, tasks: set[str] | None = None) -> LogFollowerLike | None: ...

    def sync(self) -> Mapping[str, object]: ...

    def up(self, say: Callable[[str], None], do_sync: bool = True) -> str: ...

    def down(self, grace_s: float = 10.0) -> DownSummary: ...

    def restart_task(self, task: str) -> None: ...

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


class FindingLike(Protocol):
    """One observation worth a person's attention (from `tfctl.remote.gpus.findings` or a fake).

    `gpu` is the GPU's index or UUID on `host` (None: the whole host or the job). An optional
    `task` attribute (as `tfctl.remote.gpus.findings.Finding` has) marks that task's row too."""

    @property
    def level(self) -> str: ...

    @property
    def text(self) -> str: ...

    @property
    def host(self) -> str | None: ...

    @property
    def gpu(self) -> int | str | None: ...


@dataclass(frozen=True)
class Finding:
    """A concrete finding, for fakes and for the app's own (unreachable host, failed task)."""

    level: FindingLevel
    text: str
    host: str | None = None
    gpu: int | str | None = None
    task: str | None = None


OwnerOf = Callable[[str, str], str]
"""owner_of(host, gpu_uuid) -> "worker:3" | "foreign pid 4242 user bob" | "idle"; non-blocking."""

FindingsSource = Callable[[], Sequence[FindingLike]]
