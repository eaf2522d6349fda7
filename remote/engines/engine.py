"""Where a run's tasks run, as one interface: the user's own hosts (`hosts.HostsEngine`) or a
Slurm job (`slurm.SlurmEngine`); other schedulers would be more of the same.

An `Engine` starts a run from a plan (what to run) and `UpOptions` (how), then reads, waits for,
stops and restarts it. `RunController` (remote/controller.py) holds one, chosen once
(`choice.py`: from `up --on`, or from the current run the state file names), and hands it
every call without asking which it is, as httpx's `Client` holds a transport (encode/httpx
`_transports/base.py`). The records the engines answer with are here, beside the interface, so
that the engines and the front ends share them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from tfctl.remote.connect.session.agentops import StopAnswer
from tfctl.remote.errors import FleetError, RemoteError
from tfctl.remote.runs.current import CurrentRun
from tfctl.remote.runs.status import RunStatus, TaskStatus

if TYPE_CHECKING:
    from tfctl.inventory.model import Inventory
    from tfctl.inventory.plan import Plan
    from tfctl.remote.runs.logs import LogFollower
    from tfctl.remote.runs.relaunch import RestartResult
    from tfctl.remote.runs.steps import StepRows, UpHooks

Say = Callable[[str], None]


@dataclass(frozen=True)
class UpOptions:
    """How a run starts; the CLI's `up` options and the dashboard's `u` key both build one."""

    sync: bool = True
    force_setup: bool = False
    force: bool = False
    """Launch even onto GPUs that other processes hold (otherwise `GpusBusy` is raised)."""
    ps_first: bool = False
    """Start the ps first (`up --ps-first`); by default every task at once: TensorFlow's
    workers and chief wait for their parameter servers."""
    start_timeout_s: float = 180.0


@dataclass(frozen=True)
class Started:
    """A run an engine started: its id, and the read that ended the start (every task
    verified started, or as the scheduler has it)."""

    run_id: str
    status: RunStatus


@dataclass(frozen=True)
class StatusReport:
    run: CurrentRun
    status: RunStatus
    stopped: tuple[str, ...]
    """Parameter servers stopped by this read, because it found the job ended."""


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


class Engine(Protocol):
    """What `RunController` asks of the place a run runs. Every method but `start_steps`
    blocks (SSH)."""

    def take_gpus(self, inventory: Inventory, say: Say
              ) -> tuple[Inventory, dict[str, tuple[int, ...]]]:
        """The inventory a start here plans from, and the GPUs taken per host for it: the
        hosts' engine takes the GPUs free now on `gpus: free` hosts (`NoFreeGpus` when too few
        are); an engine whose scheduler gives the GPUs returns `inventory` as it is."""

    def start_steps(self, plan: Plan, options: UpOptions) -> StepRows | None:
        """The live rows a front end may draw while `start` works host by host, or None where
        the engine tells its progress in lines only."""

    def start(self, plan: Plan, options: UpOptions, say: Say, hooks: UpHooks) -> Started:
        """Start every task of `plan` as a new run and remember it as the current one.
        `hooks.run_started` hears the run id once there is something to stop (from then on
        `rollback` stops it); a failure after that stops what started before it is raised.
        `say` gets one line per step (warnings start with `WARNING`)."""

    def status_report(self, tail: int = 1) -> StatusReport | None:
        """Every task with `tail` log lines (None without a run); an ended job's parameter
        servers are stopped and its end recorded."""

    def host_status(self, host: str) -> tuple[TaskStatus, ...]:
        """The tasks planned on host `host` (RemoteError when it cannot be read)."""

    def log_follower(self, tasks: set[str] | None = None) -> LogFollower | None:
        """A follower of the tasks' logs (all when `tasks` is None), or None without a run."""

    def wait(self, timeout: float | None = None, poll_s: float = 1.0,
             on_event: Say | None = None) -> WaitResult | None:
        """Block until the job ends or `timeout` seconds pass; None without a run."""

    def down(self, grace_s: float = 10.0, on_event: Say | None = None) -> DownSummary:
        """Stop every process of the run and verify they are gone."""

    def restart_task(self, task: str) -> None:
        """Stop `task` and start it again with its plan; `EngineRefused` where the engine
        restarts its tasks itself."""

    def restart(self, target: str, wait_s: float | None = None) -> RestartResult:
        """Start again the lost tasks of host `target` or the lost task `target`;
        `EngineRefused` where the engine restarts its tasks itself."""

    def rollback(self, run_id: str, cause: str | None = None) -> str:
        """Stop what `start` started as `run_id`; what was done, in a sentence."""

    def close(self) -> None:
        """Release what the engine holds of its own (the controller's fleet stays open)."""


class EngineRefused(FleetError):
    """The run's engine does not do what was asked (a Slurm job's tasks are Slurm's to restart):
    nothing was done, and the message says what to do instead."""

    def __init__(self, what: str) -> None:
        super().__init__(what, kind="engine_refused")
