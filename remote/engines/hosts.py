"""The user's hosts as a run's engine: `start` is `up`'s sequence of phases
(remote/runs/up/sequence.py), each host's agent answers for its tasks, and `down`, `restart` and
`wait` are requests to those agents over the controller's fleet.

The engine reads the run the controller chose (the state file, the hosts, or `--run`) through
`current` on every call, since the dashboard's controller follows new runs as they start.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from tfctl.inventory.model import Inventory
from tfctl.inventory.plan import Plan
from tfctl.remote.connect.fleet import Fleet
from tfctl.remote.connect.session import agentops
from tfctl.remote.engines.engine import DownSummary, Started, StatusReport, UpOptions, WaitResult
from tfctl.remote.runs.current import CurrentRun, remember
from tfctl.remote.runs.logs import LogFollower
from tfctl.remote.runs.status import (
    TaskStatus,
    describe_fatal,
    finalize_if_ended,
    read_status,
    task_from_agent,
)
from tfctl.remote.runs.steps import StepRows, UpHooks, host_steps
from tfctl.remote.runs.stop import stop_run, stopped_tasks

if TYPE_CHECKING:
    from tfctl.remote.runs.relaunch import RestartResult

Say = Callable[[str], None]


class HostsEngine:
    """A run on the inventory's hosts, reached over `fleet`; `current(refresh)` is the run the
    controller acts on and `plan()` the inventory's plan (for rollback and task placement)."""

    def __init__(self, fleet: Fleet, current: Callable[[bool], CurrentRun | None],
                 plan: Callable[[], Plan]):
        self.fleet = fleet
        self._current = current
        self._plan = plan

    def take_gpus(self, inventory: Inventory, say: Say
              ) -> tuple[Inventory, dict[str, tuple[int, ...]]]:
        """`gpus: free` hosts take the GPUs free now (remote/lab/freegpus.py); other inventories
        are planned as they are."""
        if all(h.free_gpus is None for h in inventory.hosts):
            return inventory, {}
        from tfctl.remote.lab.freegpus import take_free_gpus

        return take_free_gpus(self.fleet, inventory, say)

    def start_steps(self, plan: Plan, options: UpOptions) -> StepRows:
        return host_steps(plan.inventory, options.sync, plan)

    def start(self, plan: Plan, options: UpOptions, say: Say, hooks: UpHooks) -> Started:
        """Check every host, sync and set up where the checks found it needed, judge the busy
        GPUs and taken ports, start every task, remember the run (one sequence for every host,
        whatever its state). Raises `SyncFailed`, `SetupFailed` (or the host's connection
        error) or `GpusBusy` with nothing started; a launch failure (`LaunchFailed`) or Ctrl-C
        (`rollback.Interrupted`) is raised after everything this run started was stopped."""
        from tfctl.remote.runs.up.sequence import up

        run_id, status = up(self.fleet, plan, say, options, hooks=hooks)
        remember(plan.inventory, run_id, plan.hosts_used)
        return Started(run_id, status)

    def status_report(self, tail: int = 1) -> StatusReport | None:
        run = self._current(False)
        if run is None:
            return None
        st = read_status(self.fleet, run.run_id, list(run.hosts), tail=tail)
        return StatusReport(run, st, tuple(finalize_if_ended(self.fleet, st, list(run.hosts))))

    def host_status(self, host: str) -> tuple[TaskStatus, ...]:
        run = self._current(False)
        if run is None or host not in run.hosts:
            return ()
        t = self.fleet.transport(host)
        answer = agentops.status(t, t.host.workdir, run.run_id, tail=1)
        return tuple(task_from_agent(host, raw) for raw in answer.tasks)

    def log_follower(self, tasks: set[str] | None = None) -> LogFollower | None:
        run = self._current(False)
        if run is None:
            return None
        return LogFollower(self.fleet, run.run_id, list(run.hosts), tasks)

    def wait(self, timeout: float | None = None, poll_s: float = 1.0,
             on_event: Say | None = None) -> WaitResult | None:
        """The job's end waits for tasks lost to their host's restart: `on_event` hears of
        each such host once (what `tfctl restart` would do)."""
        run = self._current(False)
        if run is None:
            return None
        hosts = list(run.hosts)
        deadline = None if timeout is None else time.monotonic() + timeout
        told: dict[str, float] = {}
        while True:
            st = read_status(self.fleet, run.run_id, hosts)
            for host, at in st.lost_to_restarts.items():
                if on_event is not None and told.get(host) != at:
                    from tfctl.remote.runs.relaunch import lost_words

                    told[host] = at
                    on_event(lost_words(st, host) + "; the job waits")
            if st.job_ended and not st.unreachable:
                fatal = describe_fatal(st.fatal) if st.fatal is not None else None
                stopped = tuple(finalize_if_ended(self.fleet, st, hosts))
                return WaitResult(run.run_id, True, st.exit_code, fatal, stopped)
            if deadline is not None and time.monotonic() > deadline:
                return WaitResult(run.run_id, False, timed_out=True)
            time.sleep(poll_s)

    def down(self, grace_s: float = 10.0, on_event: Say | None = None) -> DownSummary:
        """TERM, grace, KILL and verify on the hosts the run recorded (a run started on part of
        the hosts is stopped there only)."""
        run = self._current(True)
        if run is None:
            return DownSummary(None, (), ())
        if on_event is not None:
            on_event(f"stopping run {run.run_id} on {', '.join(run.hosts)} (TERM, then KILL "
                     f"after {grace_s:g} s)")
        result = stop_run(self.fleet, run.run_id, run.hosts, grace_s=grace_s)
        killed = sorted(n for r in result.succeeded.values() for n in r.killed_after_grace)
        problems = {h: r for h, r in result.succeeded.items() if not r.clean}
        return DownSummary(run.run_id, tuple(stopped_tasks(result)), tuple(result.failed),
                           tuple(killed), problems, dict(result.failed))

    def restart_task(self, task: str) -> None:
        run = self._current(False)
        if run is None:
            raise LookupError("no run")
        host = self._task_host(run, task)
        stop_run(self.fleet, run.run_id, [host], grace_s=5.0, tasks=[task])
        t = self.fleet.transport(host)
        agentops.launch(t, t.host.workdir, run.run_id, [task])

    def restart(self, target: str, wait_s: float | None = None) -> RestartResult:
        from dataclasses import replace

        from tfctl.remote.runs.relaunch import START_WAIT_S, RestartResult, restart_lost, target_of

        run = self._current(False)
        if run is None:
            raise LookupError("no run: start one with `tfctl up`")
        found = read_status(self.fleet, run.run_id, list(run.hosts))
        host, tasks = target_of(found, run.hosts, target)
        # The read itself has a new keeper take back the tasks a killed one left (agent/keeper.py)
        taken = found.taken_back.get(host) or {}
        taken_names = tuple(taken.get("tasks") or ())
        lost = [t.name for t in found.tasks if t.host == host and t.state == "lost"]
        if taken_names and not lost and (tasks is None or set(tasks) <= set(taken_names)):
            return RestartResult(run.run_id, host, (), None, taken.get("keeper_pid"), {},
                                 taken_names)
        result = restart_lost(self.fleet, run.run_id, host, tasks,
                              START_WAIT_S if wait_s is None else wait_s)
        return replace(result, taken_back=taken_names + result.taken_back)

    def _task_host(self, run: CurrentRun, task: str) -> str:
        """Where the run placed `task`: its own record, since a run started on part of the hosts
        (`up --only`) numbers its tasks differently from the whole inventory's plan."""
        if len(run.hosts) == 1:
            return run.hosts[0]
        found = read_status(self.fleet, run.run_id, list(run.hosts))
        return next((t.host for t in found.tasks if t.name == task), self._plan().task(task).host)

    def rollback(self, run_id: str, cause: str | None = None) -> str:
        from tfctl.remote.runs.up.rollback import rollback

        return rollback(self.fleet, self._plan(), run_id, cause)

    def close(self) -> None:
        """Nothing of its own: the fleet is the controller's."""
