"""`tfctl check`: preflight every host; one line per host and problem; exit 1 if any fails.

`--json` prints one object instead: `ok`, and per host its findings (level ok/info/warn/fail and
the sentence), in the inventory's order.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

import click

from tfctl.tui.cli.context import EXIT_FAILED, obj
from tfctl.tui.cli.output import echo, print_json, secho

if TYPE_CHECKING:
    from tfctl.inventory.plan import Plan
    from tfctl.remote.connect.fleet import Fleet
    from tfctl.remote.runs.check import HostReport, Level

EXPOSURE_WARNING = ("TensorFlow's gRPC task ports accept anyone on the network (no "
                    "authentication): `tfctl check --firewall` prints rules that admit only "
                    "the inventory's hosts")
GROUP_EXPOSURE_WARNING = ("rank 0's port (torch's TCPStore, JAX's coordinator) accepts anyone "
                          "on the network (no authentication): `tfctl check --firewall` prints "
                          "rules that admit only the inventory's hosts")
MARK = {"ok": ("✔", "green"), "info": ("·", "cyan"), "warn": ("!", "yellow"),
        "fail": ("✖", "red")}


@click.command()
@click.option("-v", "--verbose", is_flag=True, help="Also print what passed.")
@click.option("--firewall", is_flag=True, help="Print nftables and iptables rules that admit "
              "only the inventory's hosts to the TensorFlow task ports (contacts no host).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object: every host's "
              "findings, passed ones included.")
@click.pass_context
def check(ctx: click.Context, verbose: bool, firewall: bool, as_json: bool) -> None:
    """Preflight: SSH and host key, python, TensorFlow, GPUs, free and reachable task ports.

    \b
    Example:
      tfctl -i cluster.yaml check
      tfctl -i cluster.yaml --accept-new-host-keys check   # first contact: record host keys
      tfctl -i cluster.yaml check --firewall > rules.txt     # rules for each host's firewall
      tfctl check --json | jq -r '.hosts[] | select(.ok | not) | .host'
    """
    from tfctl.inventory.plan import make_plan
    from tfctl.remote.connect.clusteraddr import cluster_address
    from tfctl.remote.connect.fleet import Fleet
    from tfctl.remote.runs.check import run_check

    c = obj(ctx)
    plan = make_plan(c.load(), reach=cluster_address)
    if firewall:
        from tfctl.remote.runs.firewall import render

        if as_json:
            print_json({"firewall": render(plan)})
            return
        click.echo(render(plan), nl=False)
        return
    with Fleet(plan.inventory, c.ssh_options()) as fleet:
        plan, placing = _on_free_gpus(fleet, plan)
        reports = run_check(fleet, plan)
        notebooks = _notebooks(fleet, plan)
    for report in reports:
        if report.host in placing:
            report.add(*placing[report.host])
        if report.host in notebooks:
            report.add("info", notebooks[report.host])
    failed = sum(not report.ok for report in reports)
    if as_json:
        print_json({"ok": not failed, "warnings": [*plan.warnings, exposure(plan)], "hosts": [
            {"host": r.host, "ok": r.ok,
             "findings": [{"level": f.level, "text": f.text} for f in r.findings]}
            for r in reports]})
    else:
        _print_reports(reports, verbose, (*plan.warnings, exposure(plan)))
    if failed:
        secho(f"{failed} of {len(reports)} hosts failed the check", err=True, fg="red")
        sys.exit(EXIT_FAILED)
    if not as_json:
        secho(f"all {len(reports)} hosts ready", fg="green")


def _notebooks(fleet: Fleet, plan: Plan) -> dict[str, str]:
    """Host → what `tfctl notebook` would start there (its `python:`'s Jupyter), or the
    sentence that says how to install it (an `info`: a run needs no Jupyter)."""
    from tfctl.inventory.session import install_command
    from tfctl.remote.session import jupyter_on

    inv = plan.inventory
    found = fleet.map(lambda t: jupyter_on(t, inv.host(t.host.name).python))
    said = {}
    for host, jupyter in found.succeeded.items():
        if jupyter is None:
            continue  # no such python: the check's own finding says so
        python = inv.host(host).python
        said[host] = (f"notebook: {jupyter.words()} (`tfctl notebook`)" if jupyter.usable else
                      f"notebook: {jupyter.words()}; `{install_command(python)}` installs "
                      "what `tfctl notebook` needs")
    return said


def exposure(plan: Plan) -> str:
    """What anyone on the network can reach: TensorFlow's task ports, or rank 0's."""
    from tfctl.inventory.frameworks import framework_of

    group = framework_of(plan.inventory.job).one_group
    return GROUP_EXPOSURE_WARNING if group else EXPOSURE_WARNING


def _on_free_gpus(fleet: Fleet, plan: Plan) -> tuple[Plan, dict[str, tuple[Level, str]]]:
    """The plan on the GPUs its `gpus: free` hosts would take now (remote/lab/freegpus.py), and
    per such host what to say: which it would take, or why it cannot (a failure)."""
    from tfctl.inventory.plan import make_plan
    from tfctl.remote.connect.clusteraddr import cluster_address
    from tfctl.remote.lab.freegpus import NoFreeGpus, choose, free_hosts, read_free, with_gpus

    names = free_hosts(plan.inventory)
    if not names:
        return plan, {}
    said: dict[str, tuple[Level, str]] = {}
    chosen: dict[str, tuple[int, ...]] = {}
    for host, found in read_free(fleet, names).items():
        wanted = plan.inventory.host(host).free_gpus
        assert wanted is not None
        took = choose(wanted, found)
        if took is None:
            said[host] = ("fail", NoFreeGpus(host, wanted, found).what)
            continue
        chosen[host] = took
        said[host] = ("ok", f"`gpus: free`: up would take GPUs {', '.join(map(str, took))} now")
    return make_plan(with_gpus(plan.inventory, chosen), reach=cluster_address), said


def _print_reports(reports: list[HostReport], verbose: bool, warnings: Sequence[str]) -> None:
    for report in reports:
        status = "ok" if report.ok else "FAILED"
        secho(f"{report.host}: {status}", fg="green" if report.ok else "red", bold=True)
        for f in report.findings:
            if f.level == "ok" and not verbose and report.ok:
                continue
            mark, colour = MARK[f.level]
            echo(f"  {click.style(mark, fg=colour)} {report.host}: {f.text}")
    for text in warnings:  # the plan's (as `tfctl plan` prints them), and the ports' exposure
        echo(f"  {click.style(MARK['warn'][0], fg=MARK['warn'][1])} {text}")
