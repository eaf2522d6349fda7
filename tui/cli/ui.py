"""`tfctl ui` (and bare `tfctl`): the Textual dashboard over the real lab, in the terminal or,
with `--web`, served to browsers (tui/web/: one dashboard process per browser tab, every tab
reading the one set of sources the server runs, its hub).

Textual and the app are imported inside the command, so headless commands never load them;
textual-serve and aiohttp only under `--web`. The GPU watch (`RunController.gpu_watch`: telemetry
hub, owners and findings) and the TensorBoard tunnel come from the controller.
"""

from __future__ import annotations

import dataclasses
import signal
import sys
from collections.abc import Sequence
from functools import partial
from typing import TYPE_CHECKING

import click

from tfctl.tui.cli.context import EXIT_FAILED, Context, obj
from tfctl.tui.cli.output import echo, say, secho, warn

if TYPE_CHECKING:
    from tfctl.remote.connect.transport import SshOptions
    from tfctl.remote.controller import RunController

WEB_PORT = 8123
"""`ui --web`'s port unless --port says otherwise."""
LAPTOP_PORT = 8080
"""The local port the printed `ssh -L` line suggests (any free one works)."""
LOOPBACK = ("127.0.0.1", "localhost", "::1")


@click.command()
@click.option("--gpu-refresh", "gpu_refresh_s", type=click.FloatRange(min=0.2), default=1.0,
              show_default=True, help="Seconds between GPU redraws (nvidia-smi averages over "
              "~1 s, so faster buys little).")
@click.option("--task-refresh", "task_refresh_s", type=click.FloatRange(min=0.5), default=2.0,
              show_default=True, help="Seconds between task polls of each host.")
@click.option("--web", is_flag=True, help="Serve the dashboard to browsers instead, one "
              "dashboard per tab: on 127.0.0.1, at the address it prints (with a token); from "
              "a laptop through `ssh -L` (README: the dashboard in a browser).")
@click.option("--port", type=click.IntRange(0, 65535), default=None,
              help=f"With --web: the port to listen on (default {WEB_PORT}; 0: any free one).")
@click.option("--host", "bind_host", metavar="ADDR", default=None,
              help="With --web: the address to listen on (default 127.0.0.1); any other opens "
                   "the dashboard to whoever reaches it and has the address.")
@click.option("--web-viewer", is_flag=True, hidden=True,
              help="One browser tab's dashboard (what --web starts per tab).")
@click.option("--web-hub", metavar="SOCKET", default=None, hidden=True,
              help="With --web-viewer: the socket of the server's hub, its sources.")
@click.pass_context
def ui(ctx: click.Context, gpu_refresh_s: float, task_refresh_s: float, web: bool,
       port: int | None, bind_host: str | None, web_viewer: bool, web_hub: str | None) -> None:
    """The dashboard: every host's GPUs, the job's tasks and logs, and keys for up/down/sync.

    Keys: u up · d down · s sync · r restart task · t tunnel · x shell · l logs · g GPUs ·
    / filter · ? help · q quit (the job keeps running).

    With --web, the same dashboard in a browser: Ctrl-C ends the server and every tab's
    dashboard.

    \b
    Example:
      tfctl ui
      tfctl -i cluster.yaml ui --gpu-refresh 2
      tfctl ui --web --port 8123    # on a laptop: ssh -L 8080:127.0.0.1:8123 lab-host
    """
    c = obj(ctx)
    if not web and (port is not None or bind_host is not None):
        raise click.UsageError("--port and --host go with --web")
    if web:
        serve_web(c, WEB_PORT if port is None else port, bind_host or "127.0.0.1",
                  gpu_refresh_s=gpu_refresh_s, task_refresh_s=task_refresh_s)
        return
    if web_viewer:  # a browser tab's: every source is the server's hub's (tui/web/hub.py)
        if web_hub is None:
            raise click.UsageError("--web-viewer needs --web-hub")
        from tfctl.tui.web.viewer import run_viewer

        run_viewer(web_hub, gpu_refresh_s=gpu_refresh_s, task_refresh_s=task_refresh_s)
        return
    from tfctl.remote.controller import RunController

    controller = RunController(c.load(), dashboard_options(c))
    try:
        run_app(controller, gpu_refresh_s=gpu_refresh_s, task_refresh_s=task_refresh_s)
    finally:
        controller.close()


def dashboard_options(c: Context) -> SshOptions:
    """How the dashboard connects, in a terminal and in the web server's hub: its own
    connections for as long as it runs. It needs no holder (remote/connect/hold), and one
    would stay, lent out, for the dashboard's whole life."""
    return dataclasses.replace(c.ssh_options(), persist_s=0.0)


def run_app(controller: RunController, *, gpu_refresh_s: float = 1.0,
            task_refresh_s: float = 2.0, ends_on: Sequence[int] = (signal.SIGTERM,)) -> None:
    """Show the dashboard over an existing controller until the user quits (`tfctl demo`
    uses this too). The caller keeps the controller and closes it. A signal of `ends_on`
    ends the dashboard as `q` does, then raises KeyboardInterrupt (app/terminate.py)."""
    from tfctl.tui.app.factory import make_app
    from tfctl.tui.app.terminate import exit_on_signals

    watch = controller.gpu_watch()  # its streams are the app's TelemetrySource; it starts them
    app = make_app(controller, watch.streams, owners=watch.owner_of, findings=watch,
                   tunnel=controller.tensorboard_tunnel(), gpu_refresh_s=gpu_refresh_s,
                   task_refresh_s=task_refresh_s, reporter=partial(_report_page, controller),
                   shell=partial(_shell, controller))
    with exit_on_signals(app, ends_on):
        app.run()


def serve_web(c: Context, port: int, host: str, *, gpu_refresh_s: float,
              task_refresh_s: float) -> None:
    """`ui --web`: the dashboard for browsers until Ctrl-C (tui/web/server.py); each tab runs
    `viewer_argv`, reading the sources of the server's hub (tui/web/hub.py): the hosts see
    one dashboard however many tabs are open."""
    import socket

    from tfctl.tui.web.hub import DashboardHub
    from tfctl.tui.web.server import DashboardServer

    inv = c.load()  # a broken inventory is said once, here, not in every tab
    hub = DashboardHub(inv, dashboard_options(c), task_refresh_s=task_refresh_s,
                       report=_report_page)
    if host not in LOOPBACK:
        warn(f"--host {host}: the dashboard listens beyond this machine, over plain HTTP; "
             "whoever reaches the port with the address drives it (127.0.0.1 and `ssh -L` "
             "keep it to you)")
    server_name = socket.gethostname()

    def ready(bound: str, bound_port: int) -> None:
        token = server.access.token
        shown = server_name if bound in ("0.0.0.0", "::", "") else bound
        shown = f"[{shown}]" if ":" in shown else shown
        target = "127.0.0.1" if bound in ("0.0.0.0", "::", "") else shown
        say(f"the dashboard of {inv.name} in a browser, one per tab (Ctrl-C ends them all):")
        echo(f"http://{shown}:{bound_port}/?token={token}")
        say(f"from a laptop: ssh -L {LAPTOP_PORT}:{target}:{bound_port} {server_name}, then "
            f"open http://127.0.0.1:{LAPTOP_PORT}/?token={token}")

    try:
        hub_socket = hub.listen()
    except OSError as exc:
        where = exc.filename or "the user's runtime folder"
        secho(f"error: cannot open the dashboard's socket in {where}: {exc.strerror or exc}",
              fg="red", err=True)
        sys.exit(EXIT_FAILED)
    server = DashboardServer(viewer_argv(str(hub_socket), gpu_refresh_s, task_refresh_s),
                             host=host, port=port, title=f"tfctl · {inv.name}", on_ready=ready)
    try:
        server.serve()
    except OSError as exc:
        secho(f"error: cannot listen on {host} port {port}: {exc.strerror or exc}; choose "
              "another --port (0: any free one)", fg="red", err=True)
        sys.exit(EXIT_FAILED)
    finally:
        hub.close()


def viewer_argv(hub: str, gpu_refresh_s: float, task_refresh_s: float) -> list[str]:
    """The command of one browser tab's dashboard, `ui --web-viewer` over the hub at `hub`
    (the inventory and how to connect are the hub's)."""
    return [sys.executable, "-m", "tfctl.tui", "ui", "--web-viewer", "--web-hub", hub,
            "--gpu-refresh", str(gpu_refresh_s), "--task-refresh", str(task_refresh_s)]


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
