"""One object for everything a front end does to a run: up, wait, status, logs, down, sync,
restart, TensorBoard and the GPU watch. The CLI commands and the dashboard both call it.

The dashboard takes a `RunController` by injection (tests pass a fake with the same methods).
Every method blocks (SSH), so the UI calls them from thread workers; per-host reads
(`host_status`) exist so that one slow or dead host never delays the others.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from tfctl.inventory.model import Inventory
from tfctl.inventory.plan import Plan, make_plan
from tfctl.remote.connect import agentops
from tfctl.remote.connect.agentops import StopAnswer
from tfctl.remote.connect.clusteraddr import cluster_address
from tfctl.remote.connect.fleet import Fleet, FleetResult
from tfctl.remote.connect.transport import SshOptions
from tfctl.remote.errors import GpusBusy, RemoteError
from tfctl.remote.runs.current import CurrentRun, current_run, remember
from tfctl.remote.runs.launch import launch, new_run_id
from tfctl.remote.runs.logs import LogFollower
from tfctl.remote.runs.setup import SetupOutcome, attach_logs
from tfctl.remote.runs.status import (
    RunStatus,
    TaskStatus,
    describe_fatal,
    finalize_if_ended,
    read_status,
    task_from_agent,
)
from tfctl.remote.runs.steps import (
    WARNING,
    NoHooks,
    SyncFailed,
    UpHooks,
    busy_gpu_step,
    setup_step,
    sync_step,
)
from tfctl.remote.runs.stop import stop_run, stopped_tasks
from tfctl.remote.sync.result import SyncResult

if TYPE_CHECKING:
    from tfctl.remote.connect.tunnel import Tunnel
    from tfctl.remote.engines.slurm_run import SlurmRun
    from tfctl.remote.history.listing import RunSummary
    from tfctl.remote.lab.view import HostLab
    from tfctl.remote.runs.gpuwatch import GpuWatch
    from tfctl.remote.runs.relaunch import RestartResult

Say = Callable[[str], None]
__all__ = ["WARNING", "DownSummary", "GpusBusy", "RunController", "StatusReport", "SyncFailed",
           "UpHooks", "UpOptions", "WaitResult"]


@dataclass(frozen=True)
class UpOptions:
    """How `up` runs; the CLI's options and the dashboard's `u` key both build one."""

    sync: bool = True
    force_setup: bool = False
    force: bool = False
    """Launch even onto GPUs that other processes hold (otherwise `GpusBusy` is raised)."""
    ps_first: bool = False
    """Start the ps first (`up --ps-first`); by default every task at once: TensorFlow's
    workers and chief wait for their parameter servers."""
    start_timeout_s: float = 180.0


@dataclass(frozen=True)
class DownSummary:
    """What `down` did. `unreachable` hosts were not stopped (`errors` says why); `problems`
    are hosts where processes of the run survived SIGKILL or still hold GPU memory."""

    run_id: str | None
    stopped: tuple[str, ...]
    unreachable: tuple[str, ...]
    killed_after_grace: tuple[str, ...] = ()
    problems: Mapping[str, StopAnswer] = field(default_factory=dict)
    errors: Mapping[str, RemoteError] = field(default_factory=dict)

    @property
    def clean(self) -> bool:
        return not self.unreachable and not self.problems


@dataclass(frozen=True)
class WaitResult:
    """How `wait` ended: the job ended (`exit_code`), or `timed_out`."""

    run_id: str
    ended: bool
    exit_code: int | None = None
    fatal: str | None = None
    """Why the job failed, in a sentence, when a task's failure ended it."""
    stopped: tuple[str, ...] = ()
    """Tasks (parameter servers) stopped because the job ended."""
    timed_out: bool = False


@dataclass(frozen=True)
class StatusReport:
    run: CurrentRun
    status: RunStatus
    stopped: tuple[str, ...]
    """Parameter servers stopped by this read, because it found the job ended."""


class RunController:
    def __init__(self, inventory: Inventory, options: SshOptions | None = None):
        self.inventory = inventory
        self._plan: Plan | None = None
        self.fleet = Fleet(inventory, options)
        self._run: CurrentRun | None = None
        self.starting_run_id: str | None = None
        """Set by `up` once it chose a run id, before any task starts (for rollback)."""
        self.up_status: RunStatus | None = None
        """The read that ended the last `up` (every task verified started)."""
        self._slurm_run: SlurmRun | None = None
        self._slurm_read = False
        self.gpus_taken: dict[str, tuple[int, ...]] = {}
        """The GPUs `up` took on `gpus: free` hosts (remote/lab/place.py)."""

    @property
    def plan(self) -> Plan:
        """The inventory's plan, made on first use (`down` and `status` need none); its cluster
        spec names the hosts as they reach each other (connect/clusteraddr.py)."""
        if self._plan is None:
            self._plan = make_plan(self.inventory, reach=cluster_address)
        return self._plan

    @plan.setter
    def plan(self, value: Plan) -> None:
        self._plan = value

    # -- which run ------------------------------------------------------------------------
    def current(self, refresh: bool = False) -> CurrentRun | None:
        if self._run is None or (refresh and self._run.source != "--run"):
            self._run = current_run(self.inventory, self.fleet)
        return self._run

    def select_run(self, run_id: str) -> None:
        """Act on run `run_id` (`--run ID`) rather than the current one, on the hosts that hold
        a part of it; RemoteError when none does."""
        hosts = next((r.hosts for r in self.runs() if r.run_id == run_id), None)
        if not hosts:
            raise RemoteError("(fleet)", f"no host remembers run {run_id}: `tfctl runs` lists "
                                         "the runs they do")
        self._run = CurrentRun(run_id, "--run", tuple(hosts))

    def slurm(self) -> SlurmRun | None:
        """The current run's engine when it is a Slurm job (`up --on slurm`): status, logs,
        wait and down are then its (remote/engines/slurm_run.py), read from Slurm."""
        if not self._slurm_read:
            from tfctl.remote.engines.slurm_run import SlurmRun

            self._slurm_read = True
            self._slurm_run = SlurmRun.remembered(self.inventory, self.fleet.options)
        return None if self._run is not None and self._run.source == "--run" \
            else self._slurm_run

    @property
    def run_id(self) -> str | None:
        run = self.current()
        return run.run_id if run else None

    # -- reads ----------------------------------------------------------------------------
    def status_report(self, tail: int = 1) -> StatusReport | None:
        """Every task of the current run with `tail` log lines; if the job ended, its parameter
        servers are stopped and the end recorded (`stopped`)."""
        if (slurm := self.slurm()) is not None:
            found = slurm.status(tail)
            return StatusReport(CurrentRun(found.run_id, slurm.source(found), ()), found, ())
        run = self.current()
        if run is None:
            return None
        st = read_status(self.fleet, run.run_id, list(run.hosts), tail=tail)
        return StatusReport(run, st, tuple(finalize_if_ended(self.fleet, st, list(run.hosts))))

    def status(self, tail: int = 1) -> RunStatus | None:
        report = self.status_report(tail)
        return report.status if report else None

    def host_status(self, host: str) -> tuple[TaskStatus, ...]:
        """One host's tasks of the current run (raises RemoteError if it is unreachable)."""
        if (slurm := self.slurm()) is not None:  # the tasks planned there, wherever they run
            return tuple(t for t in slurm.status().tasks if t.name in slurm.tasks_on(host))
        run = self.current()
        if run is None or host not in run.hosts:
            return ()
        t = self.fleet.transport(host)
        answer = agentops.status(t, t.host.workdir, run.run_id, tail=1)
        return tuple(task_from_agent(host, raw) for raw in answer.tasks)

    def log_follower(self, tasks: set[str] | None = None) -> LogFollower | None:
        if (slurm := self.slurm()) is not None:
            return slurm.log_follower(tasks)  # type: ignore[return-value]
        run = self.current()
        if run is None:
            return None
        return LogFollower(self.fleet, run.run_id, list(run.hosts), tasks)

    logs = log_follower

    def wait(self, timeout: float | None = None, poll_s: float = 1.0,
             on_event: Say | None = None) -> WaitResult | None:
        """Block until the current job ends (then stop its parameter servers) or `timeout`
        seconds pass; None when there is no run. The job's end waits for tasks lost to their
        host's restart: `on_event` hears of each such host once (what `tfctl restart` would do)."""
        if (slurm := self.slurm()) is not None:
            found = slurm.wait(timeout, poll_s)
            if found is None:
                return WaitResult(str(slurm.run_id), False, timed_out=True)
            return WaitResult(found.run_id, True, found.exit_code, slurm.fatal_words(found))
        run = self.current()
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

    # -- actions --------------------------------------------------------------------------
    def sync(self) -> dict[str, SyncResult]:
        """Sync the code to every host; raises the first host's failure."""
        result = self.sync_report()
        if result.failed:
            raise next(iter(result.failed.values()))
        return dict(result.succeeded)

    def sync_report(self, delete: bool = False, on_event: Say | None = None
                    ) -> FleetResult[SyncResult]:
        """Sync the code to every host; every host's result or failure (nothing raised)."""
        from tfctl.remote.sync.rsync import sync_all

        say = on_event
        return sync_all(self.fleet, delete=delete,
                        progress=None if say is None else lambda h, m: say(f"{h}: {m}"))

    def setup(self, options: UpOptions = UpOptions(), on_event: Say | None = None, *,
              hooks: UpHooks | None = None) -> FleetResult[SetupOutcome]:
        """`up`'s first two steps alone: sync (if `options.sync`), then job.setup (cached).
        Raises `SyncFailed`, or the first host's setup error."""
        say: Say = on_event or (lambda _text: None)
        hooks = hooks or NoHooks()
        if options.sync and self.inventory.job.sync.enabled:
            sync_step(self.fleet, say, hooks)
        return setup_step(self.fleet, options.force_setup, say, hooks)

    def up(self, options: UpOptions = UpOptions(), on_event: Say | None = None, *,
           hooks: UpHooks | None = None) -> str:
        """Sync, setup (cached), the busy-GPU check, start every task, remember the run.

        `gpus: free` hosts first take the GPUs free now (`gpus_taken`; `NoFreeGpus` when too
        few are). Raises `SyncFailed`, `SetupFailed` (or the host's connection error) or
        `GpusBusy` with nothing started; a launch failure (`LaunchFailed`) or Ctrl-C
        (`launch.Interrupted`) is raised after everything this run started was stopped again.
        `on_event` gets one line per step (warnings start with `WARNING`); `hooks` get the steps'
        results (the CLI prints per-host summaries from them) and the run id before any task
        starts.
        """
        say: Say = on_event or (lambda _text: None)
        hooks = hooks or NoHooks()
        self.starting_run_id = None
        if any(h.free_gpus is not None for h in self.inventory.hosts):  # `gpus: free`
            from tfctl.remote.lab.place import place_free

            self.inventory, self.gpus_taken = place_free(self.fleet, self.inventory, say)
            self._plan = None
        for w in self.plan.warnings:
            say(WARNING + w)
        from tfctl.remote.runs.onetrip import up_in_two_trips  # two requests per host

        done = up_in_two_trips(self.fleet, self.plan, say, hooks, options,
                               lambda chosen: setattr(self, "starting_run_id", chosen))
        if done is not None:
            run_id, self.up_status = done
            remember(self.inventory, run_id, self.plan.hosts_used)
            self._run = CurrentRun(run_id, "state file", self.plan.hosts_used)
            return run_id
        setup = self.setup(options, say, hooks=hooks)
        busy_gpu_step(self.fleet, self.plan, options.force, say)
        run_id = self.starting_run_id = new_run_id()
        hooks.run_started(run_id)
        launch(self.fleet, self.plan, run_id, say, start_timeout_s=options.start_timeout_s,
               ps_first=options.ps_first)
        remember(self.inventory, run_id, self.plan.hosts_used)
        attach_logs(self.fleet, run_id, setup)
        self._run = CurrentRun(run_id, "state file", self.plan.hosts_used)
        self.up_status = read_status(self.fleet, run_id, list(self.plan.hosts_used), mark_up=True)
        return run_id

    def up_slurm(self, options: UpOptions = UpOptions(), on_event: Say | None = None, *,
                 hooks: UpHooks | None = None) -> str:
        """`up --on slurm`: sync once to `slurm.workdir`, `sbatch` the plan's script there,
        remember the job as the current run (remote/engines/slurm_run.py)."""
        from tfctl.remote.engines.slurm_run import SlurmRun

        say: Say = on_event or (lambda _text: None)
        for w in self.plan.warnings:
            say(WARNING + w)
        run = SlurmRun(self.inventory, self.fleet.options)
        self._slurm_run, self._slurm_read = run, True
        run_id = self.starting_run_id = run.submit(self.plan, say, sync=options.sync)
        (hooks or NoHooks()).run_started(run_id)  # from now on an interrupt cancels the job
        self._run = CurrentRun(run_id, "state file", self.plan.hosts_used)
        self.up_status = run.status()
        return run_id

    def rollback(self, run_id: str | None = None, cause: str | None = None) -> str:
        """Stop what `up` started as `run_id` (default: the run `up` was starting); a sentence.
        `cause` is recorded as why the run was aborted (`tfctl runs` shows it)."""
        from tfctl.remote.runs.launch import rollback

        chosen = run_id or self.starting_run_id
        if chosen is not None and self._slurm_run is not None and self._slurm_run.job:
            self._slurm_run.cancel(5.0)
            return f"cancelled Slurm job {chosen.removeprefix('slurm-')}"
        return "nothing had started" if chosen is None else rollback(self.fleet, self.plan,
                                                                    chosen, cause)

    def down(self, grace_s: float = 10.0, on_event: Say | None = None) -> DownSummary:
        """TERM, grace, KILL and verify every process of the current run on the hosts it used
        (those it recorded, so a run started on part of the lab is stopped there only);
        `on_event` hears which run and hosts before they are stopped."""
        if (slurm := self.slurm()) is not None:  # scancel, then every step verified gone
            stopped, errors = slurm.down(grace_s, on_event)
            return DownSummary(slurm.run_id, stopped, tuple(errors), errors=errors)
        run = self.current(refresh=True)
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
        """Stop one task and start it again with the same mask, env and command (log appended)."""
        run = self.current()
        if run is None:
            raise LookupError("no run")
        if self.slurm() is not None:
            raise RemoteError("slurm", "a Slurm run's task restarts only inside its job, as "
                              "`restart:` says: `tfctl down` and `up --on slurm` again")
        host = self._task_host(run, task)
        stop_run(self.fleet, run.run_id, [host], grace_s=5.0, tasks=[task])
        t = self.fleet.transport(host)
        agentops.launch(t, t.host.workdir, run.run_id, [task])

    def restart(self, target: str, wait_s: float | None = None) -> RestartResult:
        """Start again the lost tasks of host `target`, or the lost task `target`, in the
        current run with their plan (argv, env, mask, port), and the host's watcher
        (remote/runs/relaunch.py). Raises `relaunch.NotRestartable` for a name that is no host
        or task of the run, LookupError without a run, RemoteError when the host refuses (the
        task is not lost, the run has ended) or cannot be reached."""
        from tfctl.remote.runs.relaunch import START_WAIT_S, restart_lost, target_of

        run = self.current()
        if run is None:
            raise LookupError("no run: start one with `tfctl up`")
        if self.slurm() is not None:
            raise RemoteError("slurm", "a Slurm run's tasks are Slurm's to start again: "
                              "`tfctl down` and `up --on slurm`")
        found = read_status(self.fleet, run.run_id, list(run.hosts))
        host, tasks = target_of(found, run.hosts, target)
        return restart_lost(self.fleet, run.run_id, host, tasks,
                            START_WAIT_S if wait_s is None else wait_s)

    def _task_host(self, run: CurrentRun, task: str) -> str:
        """Where the run placed `task`: its own record, since a run started on part of the lab
        (`up --only`) numbers its tasks differently from the whole inventory's plan."""
        if len(run.hosts) == 1:
            return run.hosts[0]
        found = read_status(self.fleet, run.run_id, list(run.hosts))
        return next((t.host for t in found.tasks if t.name == task), self.plan.task(task).host)

    def ensure_tensorboard(self, allow_start: Callable[[str], bool], on_event: Say) -> bool:
        """True once `job.tensorboard` runs (started if `allow_start(why)` says so); see
        `tfctl.remote.runs.tensorboard`."""
        from tfctl.remote.runs.tensorboard import ensure_tensorboard

        return ensure_tensorboard(self, allow_start, on_event)

    def tensorboard_tunnel(self, local_port: int | None = None, say: Say | None = None
                           ) -> Tunnel | None:
        """A tunnel (`tfctl.remote.connect.tunnel.Tunnel`, not yet open) to `job.tensorboard`
        over the controller's SSH connection, or None without one."""
        tb = self.inventory.job.tensorboard
        if tb is None:
            return None
        from tfctl.remote.connect.tunnel import Tunnel

        return Tunnel(self.fleet, tb.host, tb.port, local_port, say=say)

    def gpu_watch(self, interval_s: float | None = None) -> GpuWatch:
        """Telemetry, owners and findings over this controller's connections (not started)."""
        from tfctl.remote.runs.gpuwatch import GpuWatch

        interval_ms = None if interval_s is None else max(100, round(interval_s * 1000))
        return GpuWatch(self.fleet, self.current, interval_ms)

    def runs(self) -> list[RunSummary]:
        """The runs the hosts remember, newest first (`tfctl runs`; the dashboard's `h`)."""
        from tfctl.remote.history.listing import list_runs

        return list_runs(self.fleet)[0]

    def lab(self) -> list[HostLab]:
        """Every GPU of every host: free, reserved, or held and by whom (`tfctl lab`; the
        dashboard's `L`), one agent request per host."""
        from tfctl.remote.lab.ops import read_lab

        return read_lab(self.fleet)

    def close(self) -> None:
        self.fleet.close()
        if self._slurm_run is not None:
            self._slurm_run.close()

    def __enter__(self) -> RunController:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
