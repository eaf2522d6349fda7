"""`tfctl tensorboard`: the job's TensorBoard in a local browser, through a tunnel that stays up.

Where TensorBoard comes from: the current run's `tensorboard:0` task (started by `up`). When it
is not running the command offers to start it (`--yes` skips the question; without a terminal
it only says how), in one of two ways, so that `tfctl down` always stops it:

- the current run has a `tensorboard:0` task (stopped, exited, lost): that task is launched
  again inside the same run, with the same command and empty mask;
- there is no run, or it has no TensorBoard task and nothing of it still runs on that host: a
  one-task run of its own is started (and becomes the current run).

TensorBoard is left running on Ctrl-C (it only reads the log dir); `tfctl down` stops it.
"""

from __future__ import annotations

import signal
import sys
import time
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import click

from tfctl.tui.cli.main import EXIT_FAILED, EXIT_USAGE, obj

if TYPE_CHECKING:
    from tfctl.inventory.plan import Task
    from tfctl.remote.runs.controller import RunController
    from tfctl.remote.runs.status import TaskStatus

TASK = "tensorboard:0"
START_TIMEOUT_S = 90.0


def _say(text: str) -> None:
    click.echo(click.style("tfctl: ", fg="cyan") + text, err=True)


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
    from tfctl.remote.connect.tunnel import Tunnel
    from tfctl.remote.runs.controller import RunController

    c = obj(ctx)
    inv = c.load()
    tb = inv.job.tensorboard
    if tb is None:
        click.secho("error: the inventory has no `job.tensorboard`; add e.g. `tensorboard: "
                    f"{{host: {inv.hosts[0].name}, logdir: out, port: 6006}}` under `job:`",
                    fg="red", err=True)
        sys.exit(EXIT_USAGE)
    controller = RunController(inv, c.ssh_options())
    try:
        ensure_running(controller, yes)
        tunnel = Tunnel(controller.fleet, tb.host, tb.port, local_port, say=_say)
        url = tunnel.open()
        try:
            _serve(tunnel, url, tb.host, tb.port, open_browser)
        finally:
            tunnel.close()
    finally:
        controller.close()


def _serve(tunnel: Any, url: str, host: str, port: int, open_browser: bool) -> None:
    click.echo(f"TensorBoard on {host} (127.0.0.1:{port} there): {url}")
    if tunnel.port_note:
        click.secho(tunnel.port_note, fg="yellow")
    problem = tunnel.probe()
    if problem:
        _say(click.style("warning: ", fg="yellow") + problem)
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


# ------------------------------------------------------------------ is it running? start it

def ensure_running(controller: RunController, yes: bool) -> None:
    """Return once the plan's TensorBoard task runs, starting it if allowed; else exit 1."""
    task = controller.plan.task(TASK)
    run = controller.current()
    on_host = _host_tasks(controller, task.host) if run is not None else ()
    seen = next((t for t in on_host if t.name == TASK), None)
    if seen is not None and seen.state == "running":
        return
    if run is not None and seen is None and any(t.state in ("running", "starting")
                                                for t in on_host):
        click.secho(f"error: run {run.run_id} is running on {task.host} without a TensorBoard "
                    "task (`job.tensorboard` was added after `up`): `tfctl down`, then `tfctl "
                    "up` again", fg="red", err=True)
        sys.exit(EXIT_FAILED)
    if run is not None and seen is not None and seen.state == "starting":
        _wait_listening(controller, task, run.run_id)
        return
    why = "there is no run yet" if run is None else (
        f"run {run.run_id} has no TensorBoard task" if seen is None
        else f"in run {run.run_id} it is {seen.describe()}")
    if not yes:
        if not sys.stdin.isatty():
            click.echo(f"TensorBoard is not running ({why}). Start it with "
                       "`tfctl tensorboard --yes` (or with the job: `tfctl up`).", err=True)
            sys.exit(EXIT_FAILED)
        if not click.confirm(f"TensorBoard is not running ({why}). Start it on {task.host}?",
                             default=False, err=True):
            sys.exit(EXIT_FAILED)
    if run is not None and seen is not None:
        _relaunch(controller, task, run.run_id)
    else:
        _start_alone(controller, task)


def _host_tasks(controller: RunController, host: str) -> tuple[TaskStatus, ...]:
    """The current run's tasks on `host` as the host reports them (none if it lost the run)."""
    from tfctl.remote.errors import RemoteError

    try:
        return controller.host_status(host)
    except RemoteError as exc:
        if exc.kind == "no_run":  # the state file names a run this host has no record of
            return ()
        raise


def _relaunch(controller: RunController, task: Task, run_id: str) -> None:
    from tfctl.remote.connect import agentclient
    from tfctl.remote.runs.check import describe_holder

    t = controller.fleet.transport(task.host)
    port = agentclient.call(t, "ports", {"ports": [task.port]})["ports"][0]
    if not port.get("free"):
        click.secho(f"error: {task.host}: port {task.port} (for {task.name}) is already in "
                    f"use: {describe_holder(port)}", fg="red", err=True)
        sys.exit(EXIT_FAILED)
    agentclient.call(t, "launch", {"workdir": t.host.workdir, "run_id": run_id,
                                   "tasks": [task.name]})
    _say(f"started {task.name} again in run {run_id} on {task.host}")
    _wait_listening(controller, task, run_id)


def _start_alone(controller: RunController, task: Task) -> None:
    from tfctl.remote.runs.current import remember
    from tfctl.remote.runs.launch import launch, new_run_id

    plan = replace(controller.plan, tasks=(task,))
    run_id = new_run_id()
    launch(controller.fleet, plan, run_id, _say, start_timeout_s=START_TIMEOUT_S)
    remember(controller.inventory, run_id, plan.hosts_used)
    controller.current(refresh=True)
    _say(f"started TensorBoard on {task.host} as run {run_id} (`tfctl down` stops it)")


def _wait_listening(controller: RunController, task: Task, run_id: str) -> None:
    from tfctl.remote.connect import agentclient
    t = controller.fleet.transport(task.host)
    waited = agentclient.call(t, "wait_ports", {
        "workdir": t.host.workdir, "run_id": run_id, "tasks": [task.name],
        "timeout_s": START_TIMEOUT_S}, timeout_s=START_TIMEOUT_S + 30)["tasks"][task.name]
    if waited.get("state") == "listening":
        return
    how = ("did not listen on its port in time" if waited.get("state") == "timeout"
           else f"ended at start ({waited.get('state')}, exit {waited.get('exit_code')})")
    click.secho(f"error: {task.host}: {task.name} {how}", fg="red", err=True)
    for line in waited.get("last_lines") or []:
        click.echo(f"    {line}", err=True)
    sys.exit(EXIT_FAILED)
