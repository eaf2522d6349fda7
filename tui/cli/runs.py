"""`tfctl runs`: the runs of this inventory, newest first, read from the hosts."""

from __future__ import annotations

import json
import time

import click

from tfctl.tui.cli.context import obj


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_context
def runs(ctx: click.Context, as_json: bool) -> None:
    """Every run the hosts remember: id, start, duration, how it ended, tasks, hosts, outputs.

    \b
    Example:
      tfctl runs
      tfctl runs --json | jq '.runs[0].ended'
    """
    from tfctl.remote.connect.fleet import Fleet
    from tfctl.remote.history.listing import list_runs

    c = obj(ctx)
    inv = c.load()
    with Fleet(inv, c.ssh_options()) as fleet:
        found, unreachable = list_runs(fleet)
    if as_json:
        click.echo(json.dumps({"runs": [r.to_json() for r in found],
                               "unreachable": unreachable}, indent=2))
        return
    if not found:
        click.echo("no runs on the hosts yet: start one with `tfctl up`")
    for run in found:
        started = time.strftime("%Y-%m-%d %H:%M", time.localtime(run.started_at or 0))
        took = "running" if run.live else (
            f"{run.duration_s:.0f} s" if run.duration_s is not None else "?")
        click.echo(f"{run.run_id}  {started}  {took:>9}  {run.ended or 'running'}")
        click.echo(f"    {len(run.tasks)} tasks on {', '.join(run.hosts)} · outputs "
                   f"{', '.join(run.outputs) or '–'}")
    for host, why in unreachable.items():
        click.secho(f"  ✖ {host}: {why} (its runs are not listed)", fg="red", err=True)
