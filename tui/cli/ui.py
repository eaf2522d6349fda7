"""`tfctl ui` (and bare `tfctl`): the Textual dashboard over the real lab.

Textual and the app are imported inside the command, so headless commands never load them.
The telemetry hub (`tfctl.remote.gpus.telemetry.TelemetryHub`), owners and findings are wired in
when this build has them (guarded imports): without them the dashboard still runs and says
"telemetry not available" on each host.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import click

from tfctl.tui.cli.main import obj

if TYPE_CHECKING:
    from tfctl.remote.runs.controller import RunController
    from tfctl.tui.app.sources import FindingLike


@click.command()
@click.option("--gpu-refresh", "gpu_refresh_s", type=click.FloatRange(min=0.2), default=1.0,
              show_default=True, help="Seconds between GPU redraws (nvidia-smi averages over "
              "~1 s, so faster buys little).")
@click.option("--task-refresh", "task_refresh_s", type=click.FloatRange(min=0.5), default=2.0,
              show_default=True, help="Seconds between task polls of each host.")
@click.pass_context
def ui(ctx: click.Context, gpu_refresh_s: float, task_refresh_s: float) -> None:
    """The dashboard: every host's GPUs, the job's tasks and logs, and keys for up/down/sync.

    Keys: u up · d down · s sync · r restart task · t tunnel · l logs · g GPUs · / filter ·
    ? help · q quit (the job keeps running).

    \b
    Example:
      tfctl ui
      tfctl -i cluster.yaml ui --gpu-refresh 2
    """
    from tfctl.remote.runs.controller import RunController

    c = obj(ctx)
    controller = RunController(c.load(), c.ssh_options())
    try:
        run_app(controller, gpu_refresh_s=gpu_refresh_s, task_refresh_s=task_refresh_s)
    finally:
        controller.close()


def run_app(controller: RunController, *, gpu_refresh_s: float = 1.0,
            task_refresh_s: float = 2.0) -> None:
    """Show the dashboard over an existing controller until the user quits (`tfctl demo`
    uses this too). The caller keeps the controller and closes it."""
    from tfctl.tui.app.app import TfctlApp

    hub = telemetry_hub(controller)
    lab = LabFindings(controller, hub) if hub is not None else None
    app = TfctlApp(controller.inventory, controller, hub,
                   owners=lab.owner_of if lab is not None else None,
                   findings=lab if lab is not None else None,
                   tunnel=tensorboard_tunnel(controller),
                   gpu_refresh_s=gpu_refresh_s, task_refresh_s=task_refresh_s)
    app.run()


def tensorboard_tunnel(controller: RunController) -> Any:
    """The `t` key's tunnel to `job.tensorboard` (`tfctl.remote.connect.tunnel.Tunnel`, over the
    controller's SSH connection; local port 6006 or the next free one), or None without one."""
    tb = controller.inventory.job.tensorboard
    if tb is None:
        return None
    from tfctl.remote.connect.tunnel import Tunnel

    return Tunnel(controller.fleet, tb.host, tb.port)


def telemetry_hub(controller: RunController) -> Any:
    """The live GPU stream (`tfctl.remote.gpus.telemetry.TelemetryHub`, sharing the controller's
    SSH connections) if this build has one, else None: hosts then say "telemetry not
    available". The hub satisfies `tfctl.tui.app.sources.TelemetrySource` as it is."""
    try:
        from tfctl.remote.gpus.telemetry import TelemetryHub
    except ImportError:
        return None
    return TelemetryHub(controller.fleet)


class LabFindings:
    """Owners and findings over the real lab, for the app's findings worker.

    Each call (from a thread worker, every task refresh) re-reads the run's task processes
    (`OwnerCache.refresh`, one agent round trip per host), tracks log progress and applies every
    rule of `tfctl.remote.gpus.findings`. `owner_of` reads the cache and never blocks."""

    def __init__(self, controller: RunController, hub: Any) -> None:
        from tfctl.remote.gpus.owners import OwnerCache

        self.controller = controller
        self.hub = hub
        self.cache = OwnerCache(controller.fleet, hub.snapshots)
        self.marks: dict[Any, Any] = {}

    def __call__(self) -> list[FindingLike]:
        from tfctl.remote.gpus.findings import all_findings, track_logs

        run = self.controller.current()
        self.cache.refresh(run.run_id if run else None, list(run.hosts) if run else [])
        now = time.monotonic()
        self.marks = track_logs(self.marks, self.cache.tasks, now)
        return list(all_findings(self.hub.snapshots(), self.hub.history, self.cache.tasks,
                                 self.marks, now))

    def owner_of(self, host: str, uuid: str) -> str:
        label: str = self.cache.owner_of(host, uuid)
        return label
