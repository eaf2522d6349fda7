"""`tfctl restart HOST|TASK`: start again, in the same run, what a host's restart lost.

The command is `RunController.restart` (remote/runs/relaunch.py): the host starts its lost tasks
with their plan under the run's keeper there, then the command waits for them to listen (tasks
that ran on after their keeper was killed are taken back by a new keeper, and said). Exit 0
when every task it started runs; 1 when the host refuses (the task runs, ended, was stopped, or
the run has ended), cannot be reached, or a task it started died at once; 2 for a name that is
no host or task of the run.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any, NoReturn

import click

from tfctl.tui.cli.context import EXIT_FAILED, complete_hosts_or_tasks, obj
from tfctl.tui.cli.output import echo, error_line, print_json, say, secho

if TYPE_CHECKING:
    from tfctl.remote.runs.relaunch import RestartResult


@click.command()
@click.argument("target", metavar="HOST|TASK", shell_complete=complete_hosts_or_tasks)
@click.option("--start-timeout", "start_timeout_s", type=click.FloatRange(min=0), default=60.0,
              show_default=True, help="Seconds to wait for the tasks to listen on their ports.")
@click.option("--json", "as_json", is_flag=True,
              help="Print one JSON object on stdout (progress stays on stderr); see the README.")
@click.pass_context
def restart(ctx: click.Context, target: str, start_timeout_s: float, as_json: bool) -> None:
    """Start again the tasks a host's restart lost, in the same run, with their plan.

    A host that rebooted mid-run shows its tasks as `lost (host restarted at T)` in `tfctl
    status`. HOST starts every lost task of that host, TASK (`worker:1`) only that one: the
    same command, environment, GPU mask and port, the log appended to, under the run's
    keeper there, so a trainer that restores its checkpoint goes on from there and the job
    still ends by its rule. Tasks that ran on after their keeper was killed are taken back by
    a new keeper. A task that runs, ended or was stopped is refused.

    \b
    Example:
      tfctl status                 # worker:1  h2  lost (host restarted at 14:02:11)
      tfctl restart h2             # every lost task of h2
      tfctl restart worker:1 --json | jq .started
    """
    from tfctl.remote.controller import RunController
    from tfctl.remote.errors import RemoteError
    from tfctl.remote.runs.relaunch import NotRestartable

    c = obj(ctx)
    with RunController(c.load(), c.ssh_options()) as controller:
        try:
            result = controller.restart(target, start_timeout_s)
        except NotRestartable as exc:
            raise click.BadParameter(str(exc), ctx=ctx, param_hint="'HOST|TASK'") from None
        except LookupError as exc:
            _refuse(str(exc), as_json)
        except RemoteError as exc:
            if not as_json:
                raise
            _refuse(error_line(exc).removeprefix("error: "), as_json)
    if as_json:
        print_json(_restart_json(result))
    else:
        _say_restart(result)
    if not result.started:
        sys.exit(EXIT_FAILED)


def _refuse(sentence: str, as_json: bool) -> NoReturn:
    if as_json:
        echo(f"error: {sentence}", err=True)
    else:
        secho(f"error: {sentence}", err=True, fg="red")
    sys.exit(EXIT_FAILED)


def _say_restart(result: RestartResult) -> None:
    from tfctl.remote.reach import clock_hms

    why = (f" (lost when {result.host} restarted at {clock_hms(result.host_restarted_at_s)})"
           if result.host_restarted_at_s is not None else "")
    if result.taken_back:
        say(f"run {result.run_id}: the keeper on {result.host} was gone: "
            f"{', '.join(result.taken_back)} ran on, taken back by a new keeper")
    if result.tasks:
        say(f"run {result.run_id}: started {', '.join(result.tasks)} on {result.host} "
            f"again{why}")
    for name, state in result.states.items():
        if state.started:
            where = f"listening on {state.port}" if state.state == "listening" else state.state
            echo(f"{name} on {result.host}: {where}")
        else:
            how = state.error or (f"exited {state.exit_code}" if state.exit_code is not None
                                  else state.signal or state.state)
            secho(f"{name} on {result.host}: {how}", err=True, fg="red")
            for line in state.last_lines[-10:]:
                echo(f"  {name} | {line}", err=True)
    if result.keeper_pid is not None:
        echo(f"the run's keeper on {result.host} runs (pid {result.keeper_pid})")


def _restart_json(result: RestartResult) -> dict[str, Any]:
    from tfctl.remote.reach import iso_time

    at = result.host_restarted_at_s
    return {"run_id": result.run_id, "host": result.host, "tasks": list(result.tasks),
            "host_restarted_at": iso_time(at) if at is not None else None,
            "host_restarted_at_s": at, "keeper_pid": result.keeper_pid,
            "taken_back": list(result.taken_back),
            "started": result.started,
            "states": {n: {"state": s.state, "port": s.port, "exit_code": s.exit_code,
                           "signal": s.signal, "error": s.error}
                       for n, s in result.states.items()}}
