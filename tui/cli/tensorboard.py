"""`tfctl tensorboard`: the job's TensorBoard in a local browser, through a tunnel that stays up.

When TensorBoard is not running the command offers to start it (`--yes` skips the question;
without a terminal it only says how): `RunController.ensure_tensorboard` (see
`tfctl.remote.runs.tensorboard`) relaunches the current run's `tensorboard:0` task or starts a
one-task run of its own, so that `tfctl down` always stops it.

TensorBoard is left running on Ctrl-C (it only reads the log dir); `tfctl down` stops it.
"""

from __future__ import annotations

import signal
import sys
import time
from typing import Any

import click

from tfctl.tui.cli.context import EXIT_FAILED, EXIT_USAGE, obj
from tfctl.tui.cli.output import say, warn


@click.command()
@click.option("--port", "local_port", type=click.IntRange(1, 65535), default=6006,
              show_default=True, help="Local port to listen on (127.0.0.1 only); the next free "
              "one if it is taken.")
@click.option("--open", "open_browser", is_flag=True, help="Open the URL in a web browser.")
@click.option("-y", "--yes", is_flag=True, help="Start TensorBoard without asking if it is not "
              "running.")
@click.pass_context
def tensorboard(ctx: click.Context, local_port: int, open_browser: bool, yes: bool) -> None:
    """Tunnel local 127.0.0.1:PORT to the job's TensorBoard; stays up until Ctrl-C.

    Uses the inventory's SSH settings (host keys verified, jump host honoured) and reconnects
    by itself if the SSH connection drops. If TensorBoard is not running, offers to start it.

    \b
    Example:
      tfctl tensorboard --open
      tfctl tensorboard --port 16006 --yes
    """
    from tfctl.remote.controller import RunController

    c = obj(ctx)
    inv = c.load()
    tb = inv.job.tensorboard
    if tb is None:
        click.secho("error: the inventory has no `job.tensorboard`; add e.g. `tensorboard: "
                    f"{{host: {inv.hosts[0].name}, logdir: out, port: 6006}}` under `job:`",
                    fg="red", err=True)
        sys.exit(EXIT_USAGE)
    with RunController(inv, c.ssh_options()) as controller:
        if not controller.ensure_tensorboard(lambda why: _may_start(why, yes, tb.host), say):
            sys.exit(EXIT_FAILED)
        tunnel = controller.tensorboard_tunnel(local_port, say=say)
        assert tunnel is not None
        url = tunnel.open()
        try:
            _serve(tunnel, url, tb.host, tb.port, open_browser)
        finally:
            tunnel.close()


def _may_start(why: str, yes: bool, host: str) -> bool:
    """Whether to start TensorBoard: `--yes`, or the user's answer on a terminal."""
    if yes:
        return True
    if not sys.stdin.isatty():
        click.echo(f"TensorBoard is not running ({why}). Start it with "
                   "`tfctl tensorboard --yes` (or with the job: `tfctl up`).", err=True)
        return False
    return click.confirm(f"TensorBoard is not running ({why}). Start it on {host}?",
                         default=False, err=True)


def _serve(tunnel: Any, url: str, host: str, port: int, open_browser: bool) -> None:
    click.echo(f"TensorBoard on {host} (127.0.0.1:{port} there): {url}")
    if tunnel.port_note:
        click.secho(tunnel.port_note, fg="yellow")
    problem = tunnel.probe()
    if problem:
        warn(problem)
    click.echo("Ctrl-C stops the tunnel (TensorBoard keeps running; `tfctl down` stops it)",
               err=True)
    if open_browser:
        import webbrowser

        webbrowser.open(url)
    previous = signal.signal(signal.SIGTERM, _interrupt)  # `kill` ends it as cleanly as Ctrl-C
    try:
        while True:
            time.sleep(1.0)
    except KeyboardInterrupt:
        click.echo("tunnel closed", err=True)
    finally:
        signal.signal(signal.SIGTERM, previous)


def _interrupt(_signum: int, _frame: object) -> None:
    raise KeyboardInterrupt
