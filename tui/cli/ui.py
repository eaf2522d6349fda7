"""`tfctl ui` (and bare `tfctl`): the Textual dashboard over the real lab.

Textual and the app are imported inside the command, so headless commands never load them.
The GPU watch (`RunController.gpu_watch`: telemetry hub, owners and findings) and the
TensorBoard tunnel come from the controller.
"""

from __future__ import annotations

import dataclasses
from functools import partial
from typing import TYPE_CHECKING

import click

from tfctl.tui.cli.context import obj

if TYPE_CHECKING:
    from tfctl.remote.runs.controller import RunController


@click.command()
@click.option("--gpu-refresh", "gpu_refresh_s", type=click.FloatRange(min=0.2), default=1.0,
              show_default=True, help="Seconds between GPU redraws (nvidia-smi averages over "
              "~1 s, so faster buys little).")
@click.option("--task-refresh", "task_refresh_s", type=click.FloatRange(min=0.5), default=2.0,
              show_default=True, help="Seconds between task polls of each host.")
@click.pass_context
def ui(ctx: click.Context, gpu_refresh_s: float, task_refresh_s: float) -> None:
    """The dashboard: every host's GPUs, the job's tasks and logs, and keys for up/down/sync.

    Keys: u up · d down · s sync · r restart task · t tunnel · x shell · l logs · g GPUs ·
    / filter · ? help · q quit (the job keeps running).

    \b
    Example:
      tfctl ui
      tfctl -i cluster.yaml ui --gpu-refresh 2
    """
    from tfctl.remote.runs.controller import RunController

    c = obj(ctx)
    # Its own connections for as long as it runs: it needs no holder (remote/connect/hold), and
    # one would stay, lent out, for the dashboard's whole life.
    options = dataclasses.replace(c.ssh_options(), persist_s=0.0)
    controller = RunController(c.load(), options)
    try:
        run_app(controller, gpu_refresh_s=gpu_refresh_s, task_refresh_s=task_refresh_s)
    finally:
        controller.close()


def run_app(controller: RunController, *, gpu_refresh_s: float = 1.0,
            task_refresh_s: float = 2.0) -> None:
    """Show the dashboard over an existing controller until the user quits (`tfctl demo`
    uses this too). The caller keeps the controller and closes it."""
    from tfctl.tui.app.factory import make_app

    watch = controller.gpu_watch()  # the hub is the app's TelemetrySource; it starts it
    app = make_app(controller, watch.hub, owners=watch.owner_of, findings=watch,
                   tunnel=controller.tensorboard_tunnel(), gpu_refresh_s=gpu_refresh_s,
                   task_refresh_s=task_refresh_s, reporter=partial(_report_page, controller),
                   shell=partial(_shell, controller))
    app.run()


def _shell(controller: RunController, target: str) -> int:
    """The dashboard's `x`: `tfctl ssh TARGET` on the terminal the app handed over."""
    from tfctl.remote.connect.interactive import run_session
    from tfctl.tui.cli.logs import shell_line

    found = shell_line(controller.inventory, target)
    if found is None:
        raise ValueError(f"no host or task named {target!r}")
    host, line = found
    print(f"tfctl: a shell on {host} for {target}; `exit` returns to the dashboard", flush=True)
    return run_session(controller.fleet.transport(host), line)


def _report_page(controller: RunController, run_id: str) -> str:
    """The dashboard's `h`, Enter: the run's report written (as `tfctl report` does)."""
    from tfctl.tui.report.build import build_report

    hosts = [h.name for h in controller.inventory.hosts]
    return build_report(controller.fleet, run_id, hosts).written.page
