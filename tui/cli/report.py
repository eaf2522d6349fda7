"""`tfctl report`: what a run recorded, as figures and one offline HTML page."""

from __future__ import annotations

import sys

import click

from tfctl.tui.cli.main import EXIT_FAILED, obj


@click.command()
@click.option("--run", "run_id", metavar="ID", help="Which run (default: the current one).")
@click.option("-o", "--out", "out_dir", metavar="DIR",
              help="Where the page and PNGs go (default: runs/<run-id>/report/).")
@click.pass_context
def report(ctx: click.Context, run_id: str | None, out_dir: str | None) -> None:
    """A run's GPUs, speed, tasks and findings: report.html (self-contained) and PNGs.

    Works for a run still going, too. The run's records come home with rsync first
    (runs/<run-id>/<host>/tfctl-run/).

    \b
    Example:
      tfctl report && xdg-open runs/*/report/report.html
      tfctl report --run 20261123-221410-90d6 -o /tmp/last-night
    """
    from tfctl.remote.connect.fleet import Fleet
    from tfctl.remote.runs.current import current_run
    from tfctl.tui.report.build import build_report

    c = obj(ctx)
    inv = c.load()
    with Fleet(inv, c.ssh_options()) as fleet:
        hosts = [h.name for h in inv.hosts]
        if run_id is None:
            run = current_run(inv, fleet)
            if run is None:
                click.echo("no run found: start one with `tfctl up`", err=True)
                sys.exit(EXIT_FAILED)
            run_id, hosts = run.run_id, list(run.hosts)
        built = build_report(fleet, run_id, hosts, out_dir)
    for host, why in built.missing_hosts.items():
        click.secho(f"  ✖ {host}: {why} (the report leaves it out)", fg="yellow", err=True)
    for finding in built.findings:
        click.echo(f"{'✖' if finding.level == 'fail' else '⚠'} {finding.text}")
    click.echo(f"report: {built.written.page} ({len(built.written.pngs)} figures as PNG "
               "beside it)")
