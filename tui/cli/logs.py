"""`tfctl logs` (merged, prefixed, followed), `tfctl exec` (a command on every host),
`tfctl ssh` (a shell or a command on one host, or in one task's place and environment) and
`tfctl disconnect` (the connections kept for the next command closed now)."""

from __future__ import annotations

import sys
import time
from typing import Any

import click

from tfctl.tui.cli.context import (
    EXIT_FAILED,
    EXIT_USAGE,
    complete_hosts_or_tasks,
    complete_tasks,
    obj,
)

COLOURS = ("cyan", "green", "yellow", "magenta", "blue", "bright_cyan", "bright_green",
           "bright_yellow", "bright_magenta", "bright_blue")


@click.command()
@click.argument("tasks", nargs=-1, shell_complete=complete_tasks)
@click.option("-f", "--follow", is_flag=True, help="Keep printing new lines until Ctrl-C.")
@click.option("-n", "--lines", "n_lines", type=int, default=20, show_default=True,
              help="Lines of each log to start from.")
@click.option("--run", "run_id", metavar="ID", help="Another run than the current one.")
@click.pass_context
def logs(ctx: click.Context, tasks: tuple[str, ...], follow: bool, n_lines: int,
         run_id: str | None) -> None:
    """Print the run's task logs, merged and prefixed by task (`worker:1 | ...`).

    \b
    Example:
      tfctl logs                 # last 20 lines of every task
      tfctl logs worker:0 ps:0 -n 100
      tfctl logs -f              # follow all tasks until Ctrl-C
      tfctl logs --run 20261123-221410-90d6 worker:0
    """
    from tfctl.remote.runs.controller import RunController

    c = obj(ctx)
    with RunController(c.load(), c.ssh_options()) as controller:
        if run_id:
            controller.select_run(run_id)
        follower = controller.log_follower(set(tasks) or None)
        if follower is None:
            click.echo("no run yet: start one with `tfctl up`")
            return
        colour: dict[str, str] = {}
        width = 0
        batch = follower.poll(tail_lines=n_lines)
        while True:
            for task, line in batch.lines:
                colour.setdefault(task, COLOURS[len(colour) % len(COLOURS)])
                width = max(width, len(task))
                prefix = click.style(f"{task:<{width}} |", fg=colour[task])
                click.echo(f"{prefix} {line}")
            for host, why in batch.errors.items():
                click.secho(f"{host}: {why}", fg="red", err=True)
            if not follow:
                return
            time.sleep(0.5)
            batch = follower.poll()


def _complete_host_list(ctx: click.Context, param: click.Parameter, incomplete: str) -> Any:
    """`--hosts a,b`: the inventory's host names after the commas typed (shell completion)."""
    from tfctl.tui.cli.setup import complete_hosts_list

    return complete_hosts_list(ctx, param, incomplete)


@click.command("exec")
@click.option("--hosts", "only", default="", shell_complete=_complete_host_list,
              help="Comma-separated host names (default: all).")
@click.argument("command", nargs=-1, required=True)
@click.pass_context
def exec_(ctx: click.Context, only: str, command: tuple[str, ...]) -> None:
    """Run a command on every host in parallel; output grouped per host; worst exit status.

    \b
    Example:
      tfctl exec -- nvidia-smi -L
      tfctl exec --hosts titan,gtx970 -- df -h /data
    """
    import shlex

    from tfctl.remote.connect.fleet import Fleet

    c = obj(ctx)
    inv = c.load()
    names = [h for h in only.split(",") if h] or [h.name for h in inv.hosts]
    unknown = [h for h in names if h not in {x.name for x in inv.hosts}]
    if unknown:
        raise click.BadParameter(f"no host named {', '.join(unknown)} in {inv.path}",
                                 param_hint="--hosts")
    line = shlex.join(command)
    with Fleet(inv, c.ssh_options()) as fleet:
        result = fleet.map(lambda t: t.run(line, timeout_s=None), names)
    worst = 0
    for host, res in result.succeeded.items():
        _print_host(host, res)
        worst = max(worst, res.exit_code)
    for host, exc in result.failed.items():
        click.secho(f"── {host}: {exc}", fg="red", bold=True)
        worst = max(worst, EXIT_FAILED)
    sys.exit(worst)


def _print_host(host: str, res: Any) -> None:
    colour = "green" if res.ok else "red"
    click.secho(f"── {host} (exit {res.exit_code})", fg=colour, bold=True)
    if res.stdout:
        click.echo(res.stdout.rstrip("\n"))
    if res.stderr:
        click.echo(res.stderr.rstrip("\n"), err=True)


@click.command("ssh")
@click.argument("target", metavar="HOST|TASK", shell_complete=complete_hosts_or_tasks)
@click.argument("command", nargs=-1)
@click.pass_context
def ssh(ctx: click.Context, target: str, command: tuple[str, ...]) -> None:
    """A shell on a host (or one command, its exit status passed through), in the workdir.

    For a task (`worker:1`) the shell or command gets that task's environment as planned
    (TF_CONFIG, CUDA_VISIBLE_DEVICES, the inventory's env). Same connection settings and
    host-key checks as every other command; a pty when run from a terminal. The dashboard's
    `x` opens it for the selected host or task.

    \b
    Example:
      tfctl ssh titan                       # a login shell in titan's workdir
      tfctl ssh worker:1 -- nvidia-smi      # as worker:1 would see the GPUs
      tfctl ssh gtx970 -- python3 -c 'import os; print(os.getcwd())'
    """
    from tfctl.remote.connect.fleet import Fleet
    from tfctl.remote.connect.interactive import run_session

    c = obj(ctx)
    inv = c.load()
    line = shell_line(inv, target, command)
    if line is None:
        click.secho(f"error: no host or task named {target!r} in {inv.path} ({_names(inv)})",
                    fg="red", err=True)
        sys.exit(EXIT_USAGE)
    host, text = line
    with Fleet(inv, c.ssh_options()) as fleet:
        code = run_session(fleet.transport(host), text)
    sys.exit(code)


def shell_line(inv: Any, target: str, command: tuple[str, ...] | list[str] = ()
               ) -> tuple[str, str] | None:
    """(host, the remote line) for `tfctl ssh TARGET`: a host's workdir and env, or a task's
    cwd and env as planned; None when the inventory has no such host or task."""
    from tfctl.remote.connect.interactive import session_line

    if target in {h.name for h in inv.hosts}:
        host = inv.host(target)
        return host.name, session_line(host.workdir, host.env, command)
    from tfctl.inventory.plan import make_plan

    for task in make_plan(inv).tasks:
        if task.name == target:
            return task.host, session_line(task.cwd, task.env, command)
    return None


def _names(inv: Any) -> str:
    from tfctl.inventory.plan import make_plan

    hosts = ", ".join(h.name for h in inv.hosts)
    tasks = [t.name for t in make_plan(inv).tasks]
    shown = ", ".join(tasks[:8]) + (", …" if len(tasks) > 8 else "")
    return f"hosts: {hosts}; tasks: {shown}"


@click.command("disconnect")
def disconnect() -> None:
    """Close the connections kept for the next command now (as `ssh -O exit`).

    Commands keep their hosts' connections and an agent session on each for `--persist`
    seconds (default 60) after the last one, in a background holder of yours; this ends it at
    once: its agent sessions on the hosts end and the next command connects afresh. Nothing
    of a run is touched.

    \b
    Example:
      tfctl disconnect
      tfctl --persist 0 status     # one command that keeps nothing
    """
    from tfctl.remote.connect.hold.borrow import stop_holder

    held = stop_holder()
    if held is None:
        click.echo("no connections kept: nothing to close")
        return
    click.echo(f"closed {held.get('links', 0)} kept connection(s) and "
               f"{held.get('sessions', 0)} idle agent session(s) (holder pid {held.get('pid')})")
