"""`tfctl plan`: what would run where, with which mask and command line; nothing is contacted."""

from __future__ import annotations

import json

import click

from tfctl.tui.cli.context import obj


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Print the plan as JSON (tasks + cluster).")
@click.pass_context
def plan(ctx: click.Context, as_json: bool) -> None:
    """Show every task of the job: host, port, GPU mask, env and exact command.

    \b
    Example:
      tfctl -i examples/two-hosts.yaml plan
      tfctl -i examples/two-hosts.yaml plan --json | jq '.tasks[].command'
    """
    from tfctl.inventory.plan import make_plan

    p = make_plan(obj(ctx).load())
    if as_json:
        click.echo(json.dumps(p.to_json(), indent=2))
        return
    from tfctl.tui.cli.output import plan_table

    plan_table(p)
