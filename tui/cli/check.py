"""`tfctl check`: preflight every host; one line per host and problem; exit 1 if any fails."""

from __future__ import annotations

import sys

import click

from tfctl.tui.cli.context import EXIT_FAILED, obj

EXPOSURE_WARNING = ("TensorFlow's gRPC task ports accept anyone on the network (no "
                    "authentication): `tfctl check --firewall` prints rules that admit only "
                    "the inventory's hosts")
MARK = {"ok": ("✔", "green"), "info": ("·", "cyan"), "warn": ("!", "yellow"),
        "fail": ("✖", "red")}


@click.command()
@click.option("-v", "--verbose", is_flag=True, help="Also print what passed.")
@click.option("--firewall", is_flag=True, help="Print nftables and iptables rules that admit "
              "only the inventory's hosts to the TensorFlow task ports (contacts no host).")
@click.pass_context
def check(ctx: click.Context, verbose: bool, firewall: bool) -> None:
    """Preflight: SSH and host key, python, TensorFlow, GPUs, free and reachable task ports.

    \b
    Example:
      tfctl -i cluster.yaml check
      tfctl -i cluster.yaml --accept-new-host-keys check   # first contact: record host keys
      tfctl -i cluster.yaml check --firewall > rules.txt     # rules for each host's firewall
    """
    from tfctl.inventory.plan import make_plan
    from tfctl.remote.connect.fleet import Fleet
    from tfctl.remote.runs.check import run_check

    c = obj(ctx)
    plan = make_plan(c.load())
    if firewall:
        from tfctl.remote.runs.firewall import render

        click.echo(render(plan), nl=False)
        return
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
    click.echo(f"  {click.style(MARK['warn'][0], fg=MARK['warn'][1])} {EXPOSURE_WARNING}")
    if failed:
        click.secho(f"{failed} of {len(reports)} hosts failed the check", fg="red", err=True)
        sys.exit(EXIT_FAILED)
    click.secho(f"all {len(reports)} hosts ready", fg="green")
