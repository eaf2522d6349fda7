"""`tfctl collect`: bring a run's outputs and logs home from every host."""

from __future__ import annotations

import sys

import click

from tfctl.tui.cli.context import EXIT_FAILED, obj


@click.command()
@click.option("--run", "run_id", metavar="ID", help="Which run (default: the current one).")
@click.pass_context
def collect(ctx: click.Context, run_id: str | None) -> None:
    """Copy each host's job outputs and run logs into runs/<run-id>/<host>/ (rsync).

    The outputs are `job.outputs` (default: the TensorBoard logdir, else `out`); the logs are
    the run's folder on the host. A second collect moves only what changed.

    \b
    Example:
      tfctl collect
      tfctl collect --run 20261123-221410-90d6 && ls runs/
    """
    from tfctl.remote.connect.fleet import Fleet
    from tfctl.remote.history.collect import collect as collect_run
    from tfctl.remote.runs.current import current_run

    c = obj(ctx)
    inv = c.load()
    with Fleet(inv, c.ssh_options()) as fleet:
        if run_id is None:
            run = current_run(inv, fleet)
            if run is None:
                click.echo("no run found: start one with `tfctl up`", err=True)
                sys.exit(EXIT_FAILED)
            run_id, hosts = run.run_id, list(run.hosts)
        else:
            hosts = [h.name for h in inv.hosts]
        result = collect_run(fleet, run_id, hosts)
    for host, got in sorted(result.succeeded.items()):
        click.echo(f"{host}: {got.files_transferred} files → {got.dest}")
    for exc in result.failed.values():
        click.secho(f"  ✖ {exc.full() if hasattr(exc, 'full') else exc}", fg="red", err=True)
    if result.failed:
        sys.exit(EXIT_FAILED)
