"""One object for everything a front end does to a run: up, down, sync, restart, status, logs.

The dashboard takes a `RunController` by injection (tests pass a fake with the same methods).
Every method blocks (SSH), so the UI calls them from thread workers; per-host reads
(`host_status`) exist so that one slow or dead host never delays the others.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from tfctl.inventory.model import Inventory
from tfctl.inventory.plan import Plan, make_plan
from tfctl.remote.connect import agentclient
from tfctl.remote.connect.fleet import Fleet
from tfctl.remote.connect.transport import SshOptions
from tfctl.remote.errors import GpusBusy
from tfctl.remote.runs.current import CurrentRun, current_run, remember
from tfctl.remote.runs.launch import launch, new_run_id
from tfctl.remote.runs.logs import LogFollower
from tfctl.remote.runs.setup import attach_logs, raise_if_failed, run_setup
from tfctl.remote.runs.status import (
    RunStatus,
    TaskStatus,
    finalize_if_ended,
    read_status,
    task_from_agent,
)
from tfctl.remote.runs.stop import stop_run
from tfctl.remote.sync.rsync import SyncResult, sync_all

Say = Callable[[str], None]
__all__ = ["GpusBusy", "RunController", "UpOptions"]


@dataclass(frozen=True)
class UpOptions:
    """How `up` runs; the CLI's options and the dashboard's `u` key both build one."""

    sync: bool = True
    force_setup: bool = False
    force: bool = False
    """Launch even onto GPUs that other processes hold (otherwise `GpusBusy` is raised)."""
    ps_first: bool = True
    start_timeout_s: float = 180.0



@dataclass(frozen=True)
class DownSummary:
    run_id: str | None
    stopped: tuple[str, ...]
    unreachable: tuple[str, ...]


class RunController:
    def __init__(self, inventory: Inventory, options: SshOptions | None = None):
        self.inventory = inventory
        self.plan: Plan = make_plan(inventory)
        self.fleet = Fleet(inventory, options)
        self._run: CurrentRun | None = None

    # -- which run ------------------------------------------------------------------------
    def current(self, refresh: bool = False) -> CurrentRun | None:
        if self._run is None or refresh:
            self._run = current_run(self.inventory, self.fleet)
        return self._run

    @property
    def run_id(self) -> str | None:
        run = self.current()
        return run.run_id if run else None

    # -- reads ----------------------------------------------------------------------------
    def status(self) -> RunStatus | None:
        run = self.current()
        if run is None:
            return None
        st = read_status(self.fleet, run.run_id, list(run.hosts))
        finalize_if_ended(self.fleet, st, list(run.hosts))
        return st

    def host_status(self, host: str) -> tuple[TaskStatus, ...]:
        """One host's tasks of the current run (raises RemoteError if it is unreachable)."""
        run = self.current()
        if run is None or host not in run.hosts:
            return ()
        t = self.fleet.transport(host)
        answer = agentclient.call(t, "status", {"workdir": t.host.workdir,
                                                "run_id": run.run_id, "tail": 1})
        return tuple(task_from_agent(host, raw) for raw in answer.get("tasks", []))

    def log_follower(self, tasks: set[str] | None = None) -> LogFollower | None:
        run = self.current()
        if run is None:
            return None
        return LogFollower(self.fleet, run.run_id, list(run.hosts), tasks)

    # -- actions --------------------------------------------------------------------------
    def sync(self) -> dict[str, SyncResult]:
        result = sync_all(self.fleet)
        if result.failed:
            raise next(iter(result.failed.values()))
        return dict(result.succeeded)

    def up(self, say: Say, do_sync: bool = True, force_setup: bool = False) -> str:
        if do_sync and self.inventory.job.sync.enabled:
            self.sync()
        setup = run_setup(self.fleet, force=force_setup,
                          progress=lambda host, text: say(f"setup {host}: {text}"))
        raise_if_failed(setup)  # a SetupFailed names the host, the command and its status
        run_id = new_run_id()
        launch(self.fleet, self.plan, run_id, say)
        attach_logs(self.fleet, run_id, setup)
        remember(self.inventory, run_id, self.plan.hosts_used)
        self._run = CurrentRun(run_id, "state file", self.plan.hosts_used)
        return run_id

    def down(self, grace_s: float = 10.0) -> DownSummary:
        run = self.current(refresh=True)
        if run is None:
            return DownSummary(None, (), ())
        result = stop_run(self.fleet, run.run_id, run.hosts, grace_s=grace_s)
        stopped = tuple(sorted(n for r in result.succeeded.values() for n in r.get("stopped", [])))
        return DownSummary(run.run_id, stopped, tuple(result.failed))

    def restart_task(self, task: str) -> None:
        """Stop one task and start it again with the same mask, env and command (log appended)."""
        run = self.current()
        if run is None:
            raise LookupError("no run")
        host = self.plan.task(task).host
        stop_run(self.fleet, run.run_id, [host], grace_s=5.0, tasks=[task])
        t = self.fleet.transport(host)
        agentclient.call(t, "launch", {"workdir": t.host.workdir, "run_id": run.run_id,
                                       "tasks": [task]})

    def close(self) -> None:
        self.fleet.close()
