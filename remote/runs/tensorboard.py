"""Making sure the plan's TensorBoard task runs (`RunController.ensure_tensorboard`).

Where TensorBoard comes from: the current run's `tensorboard:0` task (started by `up`). When it
is not running it is started, if the caller allows it, in one of two ways, so that `tfctl down`
always stops it:

- the current run has a `tensorboard:0` task (stopped, exited, lost): that task is launched
  again inside the same run, with the same command and empty mask;
- there is no run, or it has no TensorBoard task and nothing of it still runs on that host: a
  one-task run of its own is started (and becomes the current run).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Protocol

from tfctl.inventory.plan import Task
from tfctl.remote.connect.session import agentops
from tfctl.remote.errors import NoRun, RemoteError
from tfctl.remote.runs.status import TaskStatus

if TYPE_CHECKING:
    from tfctl.inventory.model import Inventory
    from tfctl.inventory.plan import Plan
    from tfctl.remote.connect.fleet import Fleet
    from tfctl.remote.runs.current import CurrentRun


class RunController(Protocol):
    """What of `RunController` this module uses (a Protocol: importing the controller here would
    make a cycle, as the controller calls this module)."""

    fleet: Fleet
    inventory: Inventory

    @property
    def plan(self) -> Plan: ...

    def current(self, refresh: bool = False) -> CurrentRun | None: ...

    def host_status(self, host: str) -> tuple[TaskStatus, ...]: ...

TASK = "tensorboard:0"
START_TIMEOUT_S = 90.0


class TensorboardError(RemoteError):
    """TensorBoard could not be made to run; the message says why (and what to do)."""

    def __init__(self, host: str, what: str, detail: str = "", *, named: bool = True) -> None:
        super().__init__(host, what, detail, kind="tensorboard")
        self.named = named

    def __str__(self) -> str:
        return super().__str__() if self.named else self.what


def ensure_tensorboard(controller: RunController, allow_start: Callable[[str], bool],
                       on_event: Callable[[str], None]) -> bool:
    """True once the plan's TensorBoard task runs; when it does not, `allow_start(why)` decides
    whether to start it (False: nothing is done and False returned). Raises TensorboardError."""
    task = controller.plan.task(TASK)
    run = controller.current()
    on_host = _host_tasks(controller, task.host) if run is not None else ()
    seen = next((t for t in on_host if t.name == TASK), None)
    if seen is not None and seen.state == "running":
        return True
    if run is not None and seen is None and any(t.state in ("running", "starting")
                                                for t in on_host):
        raise TensorboardError(task.host, f"run {run.run_id} is running on {task.host} without "
                               "a TensorBoard task (`job.tensorboard` was added after `up`): "
                               "`tfctl down`, then `tfctl up` again", named=False)
    if run is not None and seen is not None and seen.state == "starting":
        _wait_listening(controller, task, run.run_id)
        return True
    why = "there is no run yet" if run is None else (
        f"run {run.run_id} has no TensorBoard task" if seen is None
        else f"in run {run.run_id} it is {seen.describe()}")
    if not allow_start(why):
        return False
    if run is not None and seen is not None:
        _relaunch(controller, task, run.run_id, on_event)
    else:
        _start_alone(controller, task, on_event)
    return True


def _host_tasks(controller: RunController, host: str) -> tuple[TaskStatus, ...]:
    """The current run's tasks on `host` as the host reports them (none if it lost the run)."""
    try:
        return controller.host_status(host)
    except NoRun:  # the state file names a run this host has no record of
        return ()


def _relaunch(controller: RunController, task: Task, run_id: str,
              on_event: Callable[[str], None]) -> None:
    from tfctl.remote.runs.check import describe_holder

    t = controller.fleet.transport(task.host)
    port = agentops.ports(t, [task.port] if task.port is not None else [])[0]
    if not port.free:
        raise TensorboardError(task.host, f"port {task.port} (for {task.name}) is already in "
                               f"use: {describe_holder(port.raw)}")
    agentops.launch(t, t.host.workdir, run_id, [task.name])
    on_event(f"started {task.name} again in run {run_id} on {task.host}")
    _wait_listening(controller, task, run_id)


@dataclass(frozen=True)
class _AloneSettings:
    """How a run of TensorBoard alone is started: `up`'s sequence on the host `up` prepared
    (no sync, no setup), its one task checked, started and verified listening."""

    sync: bool = False
    force_setup: bool = False
    force: bool = False
    ps_first: bool = False
    start_timeout_s: float = START_TIMEOUT_S


def _start_alone(controller: RunController, task: Task, on_event: Callable[[str], None]) -> None:
    from tfctl.remote.runs.current import check_state_writable, remember
    from tfctl.remote.runs.up.sequence import up

    check_state_writable(controller.inventory)
    plan = replace(controller.plan, tasks=(task,))
    run_id, _status = up(controller.fleet, plan, on_event, _AloneSettings(), prepare=False)
    remember(controller.inventory, run_id, plan.hosts_used)
    controller.current(refresh=True)
    on_event(f"started TensorBoard on {task.host} as run {run_id} (`tfctl down` stops it)")


def _wait_listening(controller: RunController, task: Task, run_id: str) -> None:
    t = controller.fleet.transport(task.host)
    waited = agentops.wait_ports(t, t.host.workdir, run_id, [task.name], START_TIMEOUT_S,
                                 call_timeout_s=START_TIMEOUT_S + 30)[task.name]
    if waited.state == "listening":
        return
    how = ("did not listen on its port in time" if waited.state == "timeout"
           else f"ended at start ({waited.state}, exit {waited.exit_code})")
    raise TensorboardError(task.host, f"{task.name} {how}", "\n".join(waited.last_lines))
