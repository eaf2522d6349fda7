"""One object for everything a front end does to a run: up, wait, status, logs, down, sync,
restart, TensorBoard and the GPU watch. The CLI commands and the dashboard both call it.

The dashboard takes a `RunController` by injection (tests pass a fake with the same methods).
Every method blocks (SSH), so the UI calls them from thread workers; per-host reads
(`host_status`) exist so that one slow or dead host never delays the others.

A run starts on the `Engine` (remote/engines/engine.py) that `on` names (`up --on hosts|slurm`:
the user's hosts, `HostsEngine`, or one Slurm job, `SlurmEngine`); reads and stops of the run go
to the engine it is on, chosen once from the current run (remote/engines/choice.py), so that no
method here asks which engine it holds. The controller sits above remote/runs/ and
remote/engines/: it composes the engines, and the runs package under them knows none.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from tfctl.inventory.model import Inventory
from tfctl.inventory.plan import Plan, make_plan
from tfctl.remote.connect.clusteraddr import cluster_address
from tfctl.remote.connect.fleet import Fleet, FleetResult
from tfctl.remote.connect.transport import SshOptions
from tfctl.remote.engines.choice import engine_of_run, engine_to_start
from tfctl.remote.engines.engine import (
    DownSummary,
    Engine,
    StatusReport,
    UpOptions,
    WaitResult,
)
from tfctl.remote.errors import FleetError, GpusBusy, RemoteError
from tfctl.remote.runs.current import CurrentRun, check_state_writable, current_run
from tfctl.remote.runs.logs import LogFollower
from tfctl.remote.runs.setup import SetupOutcome
from tfctl.remote.runs.status import RunStatus, TaskStatus
from tfctl.remote.runs.steps import (
    WARNING,
    NoHooks,
    StepRows,
    SyncFailed,
    UpHooks,
    setup_step,
    sync_step,
)
from tfctl.remote.sync.result import SyncResult

if TYPE_CHECKING:
    from tfctl.remote.connect.tunnel import Tunnel
    from tfctl.remote.history.listing import RunSummary
    from tfctl.remote.lab.view import HostLab
    from tfctl.remote.runs.gpuwatch import GpuWatch
    from tfctl.remote.runs.relaunch import RestartResult

Say = Callable[[str], None]
__all__ = ["WARNING", "DownSummary", "GpusBusy", "RunController", "StatusReport", "SyncFailed",
           "UpHooks", "UpOptions", "WaitResult"]


class RunController:
    def __init__(self, inventory: Inventory, options: SshOptions | None = None, *,
                 on: str = "hosts"):
        self.inventory = inventory
        self.on = on
        """The engine `up` starts a run on (`up --on`: `hosts`; `slurm`; engines/choice.py)."""
        self._plan: Plan | None = None
        self.fleet = Fleet(inventory, options)
        self._run: CurrentRun | None = None
        self.starting_run_id: str | None = None
        """Set by `up` once it chose a run id, before any task starts (for rollback)."""
        self.up_status: RunStatus | None = None
        """The read that ended the last `up` (every task verified started)."""
        self._engine: Engine | None = None
        self.gpus_taken: dict[str, tuple[int, ...]] = {}
        """The GPUs `up` took on `gpus: free` hosts (remote/lab/freegpus.py)."""

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

    def select_run(self, run_id: str, hosts: tuple[str, ...] | None = None) -> None:
        """Act on run `run_id` (`--run ID`) rather than the current one, on the hosts that hold
        a part of it (`hosts`, where the caller knows them: a sweep's record); RemoteError when
        none does."""
        if hosts is None:
            from tfctl.remote.history.listing import list_runs

            hosts = next((tuple(r.hosts) for r in list_runs(self.fleet, cost=False)[0]
                          if r.run_id == run_id), None)
        if not hosts:
            raise FleetError(f"no host remembers run {run_id}: `tfctl runs` lists the runs "
                             "they do")
        self._run = CurrentRun(run_id, "--run", tuple(hosts))
        self._use(engine_of_run(self.fleet, self._current, self._get_plan, by_id=True))

    def engine(self) -> Engine:
        """Where the current run runs, chosen on first use: the Slurm job the state file names
        (`up --on slurm`), else the hosts; a run chosen with `--run` is the hosts'."""
        if self._engine is None:
            by_id = self._run is not None and self._run.source == "--run"
            self._engine = engine_of_run(self.fleet, self._current, self._get_plan, by_id)
        return self._engine

    def _current(self, refresh: bool) -> CurrentRun | None:
        return self.current(refresh)

    def _get_plan(self) -> Plan:
        return self.plan

    def _use(self, engine: Engine) -> None:
        if self._engine is not None and self._engine is not engine:
            self._engine.close()
        self._engine = engine

    @property
    def run_id(self) -> str | None:
        run = self.current()
        return run.run_id if run else None

    # -- reads ----------------------------------------------------------------------------
    def status_report(self, tail: int = 1) -> StatusReport | None:
        """Every task of the current run with `tail` log lines; if the job ended, its parameter
        servers are stopped and the end recorded (`stopped`)."""
        return self.engine().status_report(tail)

    def status(self, tail: int = 1) -> RunStatus | None:
        report = self.status_report(tail)
        return report.status if report else None

    def host_status(self, host: str) -> tuple[TaskStatus, ...]:
        """One host's tasks of the current run (raises RemoteError if it is unreachable)."""
        return self.engine().host_status(host)

    def log_follower(self, tasks: set[str] | None = None) -> LogFollower | None:
        return self.engine().log_follower(tasks)

    logs = log_follower

    def wait(self, timeout: float | None = None, poll_s: float = 1.0,
             on_event: Say | None = None) -> WaitResult | None:
        """Block until the current job ends (then stop its parameter servers) or `timeout`
        seconds pass; None when there is no run. The job's end waits for tasks lost to their
        host's restart: `on_event` hears of each such host once (what `tfctl restart` would do)."""
        return self.engine().wait(timeout, poll_s, on_event)

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
        """`tfctl setup`: sync (if `options.sync`), then job.setup (cached) on every host.
        Raises `SyncFailed`, or the first host's setup error."""
        say: Say = on_event or (lambda _text: None)
        hooks = hooks or NoHooks()
        if options.sync and self.inventory.job.sync.enabled:
            sync_step(self.fleet, say, hooks)
        return setup_step(self.fleet, options.force_setup, say, hooks)

    def up(self, options: UpOptions = UpOptions(), on_event: Say | None = None, *,
           hooks: UpHooks | None = None) -> str:
        """Start a run on the engine `on` names and remember it as the current run: on the
        hosts, check every host, sync and set up where the checks found it needed, judge the
        busy GPUs and taken ports, start every task (remote/runs/up/sequence.py: one sequence
        for every host, whatever its state); on Slurm, sync once to `slurm.workdir` and
        `sbatch` the plan's script there (remote/engines/slurm.py).

        `gpus: free` hosts first take the GPUs free now (`gpus_taken`; `NoFreeGpus` when too
        few are). Raises `SyncFailed`, `SetupFailed` (or the host's connection error) or
        `GpusBusy` with nothing started; a launch failure (`LaunchFailed`) or Ctrl-C
        (`rollback.Interrupted`) is raised after everything this run started was stopped again.
        `on_event` gets one line per step (warnings start with `WARNING`); `hooks` get the steps'
        results (the CLI prints per-host summaries from them) and the run id before any task
        starts.
        """
        say: Say = on_event or (lambda _text: None)
        self.starting_run_id = None
        check_state_writable(self.inventory)
        engine = self._engine_to_start()
        try:
            placed, taken = engine.take_gpus(self.inventory, say)
            if placed is not self.inventory:
                self.inventory, self.gpus_taken, self._plan = placed, taken, None
            for w in self.plan.warnings:
                say(WARNING + w)
            started = engine.start(self.plan, options, say,
                                   _Starting(hooks or NoHooks(), self, engine))
        except BaseException:
            if engine is not self._engine:
                engine.close()
            raise
        self._run = CurrentRun(started.run_id, "state file", self.plan.hosts_used)
        self.up_status = started.status
        return started.run_id

    def start(self, plan: Plan, options: UpOptions = UpOptions(), on_event: Say | None = None,
              *, hooks: UpHooks | None = None) -> str:
        """Start `plan` as it is, as `up` starts the inventory's job, and remember it as the
        current run: a plan made otherwise than from the job (a one-off command's,
        inventory/oneoff.py), over this controller's inventory, with no `gpus: free` host left
        to place. Raises as `up` does."""
        self.plan = plan
        return self.up(options, on_event, hooks=hooks)

    def start_steps(self, options: UpOptions = UpOptions()) -> StepRows | None:
        """The live rows a front end may draw while `up` starts the run, or None where the
        engine `on` names tells its progress in lines only."""
        engine = self._engine_to_start()
        try:
            return engine.start_steps(self.plan, options)
        finally:
            engine.close()

    def _engine_to_start(self) -> Engine:
        return engine_to_start(self.on, self.fleet, self._current, self._get_plan)

    def _starting(self, run_id: str, engine: Engine) -> None:
        """`engine` started `run_id`, before any task starts: the run is that engine's from now
        on (rollback, reads)."""
        self.starting_run_id = run_id
        self._use(engine)

    def rollback(self, run_id: str | None = None, cause: str | None = None) -> str:
        """Stop what `up` started as `run_id` (default: the run `up` was starting); a sentence.
        `cause` is recorded as why the run was aborted (`tfctl runs` shows it)."""
        chosen = run_id or self.starting_run_id
        return "nothing had started" if chosen is None else self.engine().rollback(chosen, cause)

    def down(self, grace_s: float = 10.0, on_event: Say | None = None) -> DownSummary:
        """TERM, grace, KILL and verify every process of the current run on the hosts it used
        (those it recorded, so a run started on part of the hosts is stopped there only; a Slurm
        job is cancelled and every step verified gone); `on_event` hears which run and hosts
        before they are stopped."""
        return self.engine().down(grace_s, on_event)

    def restart_task(self, task: str) -> None:
        """Stop one task and start it again with the same mask, env and command (log appended).
        LookupError without a run; `EngineRefused` for a Slurm run."""
        self.engine().restart_task(task)

    def restart(self, target: str, wait_s: float | None = None) -> RestartResult:
        """Start again the lost tasks of host `target`, or the lost task `target`, in the
        current run with their plan (argv, env, mask, port), under the run's keeper there
        (remote/runs/relaunch.py). Raises `relaunch.NotRestartable` for a name that is no host
        or task of the run, LookupError without a run, RemoteError when the host refuses (the
        task is not lost, the run has ended) or cannot be reached, `EngineRefused` for a Slurm
        run."""
        return self.engine().restart(target, wait_s)

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
        if self._engine is not None:
            self._engine.close()

    def __enter__(self) -> RunController:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _Starting:
    """The hooks a start reports to: the controller hears the run id first (from then on it
    rolls back through the engine that started it), then the front end's hooks."""

    def __init__(self, hooks: UpHooks, controller: RunController, engine: Engine) -> None:
        self.hooks = hooks
        self.controller = controller
        self.engine = engine

    def synced(self, result: FleetResult[SyncResult]) -> None:
        self.hooks.synced(result)

    def setup_done(self, result: FleetResult[SetupOutcome], errors: list[RemoteError],
                   seconds: float) -> None:
        self.hooks.setup_done(result, errors, seconds)

    def run_started(self, run_id: str) -> None:
        self.controller._starting(run_id, self.engine)
        self.hooks.run_started(run_id)
