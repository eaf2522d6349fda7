"""What `up` and `tfctl setup` tell a front end, and `tfctl setup`'s two steps: sync, then setup.

Each step reports progress through `on_event` (one line of text) and, for front ends that show
more than lines (the CLI's per-host summaries), through an `UpHooks` object; a step that fails
raises, and then nothing was started. `up` does the same sync and setup inside its own
sequence, only where its check found them needed (up/work.py), and tells the same hooks.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from tfctl.inventory.model import Inventory
from tfctl.inventory.plan import Plan
from tfctl.remote.connect.fleet import Fleet, FleetResult
from tfctl.remote.errors import RemoteError
from tfctl.remote.runs.setup import SetupOutcome, run_setup, setup_errors
from tfctl.remote.sync.result import SyncResult

OnEvent = Callable[[str], None]
WARNING = "warning: "
"""The prefix of an event that is a warning (front ends may colour it)."""


@dataclass(frozen=True)
class StepRows:
    """The live rows a front end may draw while `setup` or a start on the hosts works: a row per
    host, the steps each goes through in order, and for a start where each task runs."""

    hosts: tuple[str, ...]
    steps: tuple[str, ...]
    task_hosts: Mapping[str, str] = field(default_factory=dict)
    launch_hosts: tuple[str, ...] = ()


def host_steps(inv: Inventory, sync: bool, plan: Plan | None = None) -> StepRows:
    """The rows of `tfctl setup` (no plan), or of `up` on the hosts: sync and setup where the
    inventory has them, then, with `plan`, the GPU check and its tasks' start."""
    steps = tuple(s for s, on in (("sync", sync and inv.job.sync.enabled),
                                  ("setup", bool(inv.job.setup)), ("gpus", plan is not None))
                  if on)
    hosts = tuple(h.name for h in inv.hosts)
    if plan is None:
        return StepRows(hosts, steps)
    return StepRows(hosts, steps, {t.name: t.host for t in plan.tasks}, plan.hosts_used)


class UpHooks(Protocol):
    """What `up` tells a front end besides its event lines (`NoHooks`: nothing)."""

    def synced(self, result: FleetResult[SyncResult]) -> None:
        """The sync ended (failures are in `result.failed`; `up` raises `SyncFailed` next)."""

    def setup_done(self, result: FleetResult[SetupOutcome], errors: list[RemoteError],
                   seconds: float) -> None:
        """job.setup ended on every host; with `errors`, `up` raises the first one next."""

    def run_started(self, run_id: str) -> None:
        """A run id was chosen and tasks are about to start (from here on, roll back)."""


class NoHooks:
    def synced(self, result: FleetResult[SyncResult]) -> None:
        pass

    def setup_done(self, result: FleetResult[SetupOutcome], errors: list[RemoteError],
                   seconds: float) -> None:
        pass

    def run_started(self, run_id: str) -> None:
        pass


class SyncFailed(RemoteError):
    """The code could not be synced to some hosts: nothing was started. `failed`: host → why."""

    def __init__(self, failed: Mapping[str, RemoteError]) -> None:
        first = next(iter(failed.values()))
        super().__init__(first.host, first.what, first.detail, kind="sync")
        self.failed = dict(failed)

    def full(self) -> str:
        return "\n".join(e.full() for e in self.failed.values())


def sync_step(fleet: Fleet, on_event: OnEvent, hooks: UpHooks) -> FleetResult[SyncResult]:
    from tfctl.remote.sync.rsync import sync_all

    result = sync_all(fleet, progress=lambda h, m: on_event(f"sync {h}: {m}"))
    hooks.synced(result)
    if result.failed:
        raise SyncFailed(result.failed)
    return result


def setup_step(fleet: Fleet, force: bool, on_event: OnEvent, hooks: UpHooks
               ) -> FleetResult[SetupOutcome]:
    """job.setup on every host (cached); raises the first host's error (a `SetupFailed`)."""
    if not fleet.inventory.job.setup:
        return FleetResult({}, {})
    started = time.monotonic()
    result = run_setup(fleet, force=force, progress=lambda h, m: on_event(f"setup {h}: {m}"))
    errors = setup_errors(result)
    hooks.setup_done(result, errors, time.monotonic() - started)
    if errors:
        raise errors[0]
    return result
