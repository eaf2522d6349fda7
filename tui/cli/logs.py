"""`tfctl logs` (merged, prefixed, followed), `tfctl exec` (a command on every host) and
`tfctl ssh` (a shell or a command on one host, or in one task's place and environment)."""

from __future__ import annotations

import dataclasses
import json
import sys
import time
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any

import click

from tfctl.tui.cli.context import (
    EXIT_FAILED,
    EXIT_USAGE,
    complete_hosts_list,
    complete_hosts_or_tasks,
    complete_tasks,
    obj,
)
from tfctl.tui.cli.output import echo, error_line, print_json, say

if TYPE_CHECKING:
    from tfctl.remote.runs.logs import LogBatch

COLOURS = ("cyan", "green", "yellow", "magenta", "blue", "bright_cyan", "bright_green",
           "bright_yellow", "bright_magenta", "bright_blue")


@click.command()
@click.argument("tasks", nargs=-1, shell_complete=complete_tasks)
@click.option("-f", "--follow", is_flag=True, help="Keep printing new lines until Ctrl-C.")
@click.option("-n", "--lines", "n_lines", type=int, default=20, show_default=True,
              help="Lines of each log to start from.")
@click.option("--run", "run_id", metavar="ID", help="Another run than the current one.")
@click.option("--json", "as_json", is_flag=True,
              help="One JSON object per line on stdout: {task, host, line, read_at} (with -f "
                   "too, each line as it comes); hosts that could not be read: `error:` lines "
                   "on stderr.")
@click.pass_context
def logs(ctx: click.Context, tasks: tuple[str, ...], follow: bool, n_lines: int,
         run_id: str | None, as_json: bool) -> None:
    """Print the run's task logs, merged and prefixed by task (`worker:1 | ...`).

    Exits 1 when a host's logs could not be read (without -f; with -f it keeps trying).

    \b
    Example:
      tfctl logs                 # last 20 lines of every task
      tfctl logs worker:0 ps:0 -n 100
      tfctl logs -f              # follow all tasks until Ctrl-C
      tfctl logs --run 20261123-221410-90d6 worker:0
      tfctl logs -f --json | jq -r 'select(.task == "worker:0") | .line'
    """
    from tfctl.remote.controller import RunController
    from tfctl.tui.cli.lifecycle import _one_line_errors

    c = obj(ctx)
    with RunController(c.load(), c.ssh_options()) as controller, _one_line_errors(as_json):
        if run_id:
            controller.select_run(run_id)
        follower = controller.log_follower(set(tasks) or None)
        if follower is None:
            if as_json:
                say("no run yet: start one with `tfctl up`")
                return
            click.echo("no run yet: start one with `tfctl up`")
            return
        show = _json_lines if as_json else _prefixed_lines(fold=follow)
        batch = follower.poll(tail_lines=n_lines)
        while True:
            show(batch)
            for host, why in batch.errors.items():
                if as_json:
                    echo(f"error: {host}: {why}", err=True)
                else:
                    click.secho(f"{host}: {why}", fg="red", err=True)
            if not follow:
                if batch.errors:
                    sys.exit(EXIT_FAILED)
                return
            time.sleep(0.5)
            batch = follower.poll()


def _prefixed_lines(fold: bool = False) -> Callable[[LogBatch], None]:
    """`worker:1 | line`, each task in its own colour, the prefixes as wide as the widest yet;
    `fold` (`-f`): the framework's start-up notices folded, one line per task
    (remote/runs/notices.py)."""
    from tfctl.remote.runs.notices import NoticeFold

    colour: dict[str, str] = {}
    width = 0
    notices = NoticeFold() if fold else None

    def show(batch: LogBatch) -> None:
        nonlocal width
        for task, line in batch.lines if notices is None else notices.lines(batch.lines):
            colour.setdefault(task, COLOURS[len(colour) % len(COLOURS)])
            width = max(width, len(task))
            prefix = click.style(f"{task:<{width}} |", fg=colour[task])
            click.echo(f"{prefix} {line}")

    return show


def _json_lines(batch: LogBatch) -> None:
    """One JSON object per log line (README: Machine-readable output); click.echo flushes each,
    so `logs -f --json` hands every line on as it is read. `read_at` is when tfctl read it
    from the host (with -f within about half a second of its writing; the log holds no time
    of its own)."""
    read_at = datetime.now().astimezone().isoformat(timespec="milliseconds")
    for task, line in batch.lines:
        click.echo(json.dumps({"task": task, "host": batch.hosts.get(task), "line": line,
                               "read_at": read_at}))


@click.command("exec")
@click.option("--hosts", "only", default="", shell_complete=complete_hosts_list,
              help="Comma-separated host names (default: all).")
@click.option("--json", "as_json", is_flag=True,
              help="One JSON object on stdout: each host's exit status, stdout and stderr "
                   "(README: Machine-readable output).")
@click.argument("command", nargs=-1, required=True)
@click.pass_context
def exec_(ctx: click.Context, only: str, as_json: bool, command: tuple[str, ...]) -> None:
    """Run a command on every host in parallel; output grouped per host; worst exit status.

    \b
    Example:
      tfctl exec -- nvidia-smi -L
      tfctl exec --hosts titan,gtx970 -- df -h /data
      tfctl exec --json -- nvidia-smi -L | jq '.hosts | map_values(.exit_code)'
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
    # Shell commands go over the command's own connections: no agent session to borrow, so
    # no holder is started for it (--persist keeps agent sessions, remote/connect/hold).
    options = dataclasses.replace(c.ssh_options(), persist_s=0.0)
    with Fleet(inv, options) as fleet:
        result = fleet.map(lambda t: t.run(line, timeout_s=None), names)
    worst = max([r.exit_code for r in result.succeeded.values()]
                + [EXIT_FAILED for _ in result.failed], default=0)
    if as_json:
        print_json(_exec_json(line, names, result.succeeded, result.failed, worst))
        for exc in result.failed.values():
            echo(error_line(exc), err=True)
        sys.exit(worst)
    for host, res in result.succeeded.items():
        _print_host(host, res)
    for host, exc in result.failed.items():
        click.secho(f"── {host}: {exc}", fg="red", bold=True)
    sys.exit(worst)


def _exec_json(line: str, names: list[str], done: Mapping[str, Any],
               failed: Mapping[str, Exception], worst: int) -> dict[str, Any]:
    """`exec --json`'s object: the hosts in the inventory's order, those that ran the command
    under `hosts`, those that could not be reached or failed to run it under `failed`."""
    return {"command": line, "ok": worst == 0, "exit_code": worst,
            "hosts": {h: {"exit_code": done[h].exit_code, "stdout": done[h].stdout,
                          "stderr": done[h].stderr} for h in names if h in done},
            "failed": {h: str(failed[h]) for h in names if h in failed}}


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
    with Fleet(inv, dataclasses.replace(c.ssh_options(), persist_s=0.0)) as fleet:  # as exec
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
