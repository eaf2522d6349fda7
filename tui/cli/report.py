"""`tfctl report`: what a run recorded, as figures and one offline HTML page."""

from __future__ import annotations

import os
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
    from tfctl.remote.history.collect import collect, collect_root
    from tfctl.remote.history.findings import all_findings, summarize
    from tfctl.remote.history.records import read_run
    from tfctl.remote.runs.current import current_run

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
        fetched = collect(fleet, run_id, hosts, outputs=False)
    for host, exc in fetched.failed.items():
        click.secho(f"  ✖ {host}: {exc} (the report leaves it out)", fg="yellow", err=True)
    root = collect_root(inv, run_id)
    record = read_run(root, run_id)
    findings = all_findings(record)

    from tfctl.tui.report.page import write_report

    written = write_report(record, summarize(record), findings,
                           out_dir or os.path.join(root, "report"))
    for finding in findings:
        click.echo(f"{'✖' if finding.level == 'fail' else '⚠'} {finding.text}")
    click.echo(f"report: {written.page} ({len(written.pngs)} figures as PNG beside it)")
