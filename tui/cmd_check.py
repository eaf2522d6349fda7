"""`tfctl check`: preflight every host; one line per host and problem; exit 1 if any fails."""

from __future__ import annotations

import sys

import click

from tfctl.tui.cli import EXIT_FAILED, obj

MARK = {"ok": ("✔", "green"), "info": ("·", "cyan"), "warn": ("!", "yellow"),
        "fail": ("✖", "red")}


@click.command()
@click.option("-v", "--verbose", is_flag=True, help="Also print what passed.")
@click.pass_context
def check(ctx: click.Context, verbose: bool) -> None:
    """Preflight: SSH and host key, python, TensorFlow, GPUs, free and reachable task ports.

    \b
    Example:
      tfctl -i cluster.yaml check
      tfctl -i cluster.yaml --accept-new-host-keys check   # first contact: record host keys
    """
    from tfctl.inventory.plan import make_plan
    from tfctl.remote.check import run_check
    from tfctl.remote.fleet import Fleet

    c = obj(ctx)
    plan = make_plan(c.load())
    with Fleet(plan.inventory, c.ssh_options()) as fleet:
        reports = run_check(fleet, plan)
    failed = 0
    for report in reports:
        status = "ok" if report.ok else "FAILED"
        click.secho(f"{report.host}: {status}", fg="green" if report.ok else "red", bold=True)
        for f in report.findings:
            if f.level == "ok" and not verbose and report.ok:
                continue
            mark, colour = MARK[f.level]
            click.echo(f"  {click.style(mark, fg=colour)} {report.host}: {f.text}")
        failed += not report.ok
    if failed:
        click.secho(f"{failed} of {len(reports)} hosts failed the check", fg="red", err=True)
        sys.exit(EXIT_FAILED)
    click.secho(f"all {len(reports)} hosts ready", fg="green")
