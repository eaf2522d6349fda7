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

    The cluster spec names each host as the other hosts reach it: its `cluster_address`, else
    the HostName its ssh config gives an alias (nothing is contacted).

    \b
    Example:
      tfctl -i examples/two-hosts.yaml plan
      tfctl -i examples/two-hosts.yaml plan --json | jq '.tasks[].command'
    """
    from tfctl.inventory.plan import make_plan
    from tfctl.remote.connect.clusteraddr import cluster_address

    p = make_plan(obj(ctx).load(), reach=cluster_address)  # ssh aliases as the hosts know them
    if as_json:
        click.echo(json.dumps(p.to_json(), indent=2))
        return
    from tfctl.tui.cli.output import plan_table

    plan_table(p)


@click.group()
def export() -> None:
    """Write the job for another scheduler: a Slurm batch script or a Kubeflow TFJob.

    The same plan as `tfctl plan` (strategy, masks, env, outputs), for when the job outgrows
    the lab; nothing is contacted. README: "When you outgrow the lab".

    \b
    Example:
      tfctl -i examples/beyond-the-lab.yaml export slurm -o digits.sbatch  # sbatch digits.sbatch
      tfctl -i examples/beyond-the-lab.yaml export tfjob | kubectl apply -f -
    """


@export.command("slurm")
@click.option("-o", "--output", "output", metavar="FILE", type=click.Path(dir_okay=False),
              help="Write the script to FILE (made executable) instead of stdout.")
@click.pass_context
def export_slurm(ctx: click.Context, output: str | None) -> None:
    """An sbatch script: one job step per task, TF_CONFIG or flags computed from the nodes.

    Nodes, GPUs per node, partition, account, time and extra sbatch options come from the
    inventory's optional `slurm:` block (default: one node per host, the most GPUs a host has).

    \b
    Example:
      tfctl -i examples/beyond-the-lab.yaml export slurm -o digits.sbatch
      tfctl -i examples/two-hosts.yaml export slurm | ssh login.example.org sbatch
    """
    import os

    from tfctl.inventory.plan import make_plan
    from tfctl.remote.engines.slurm import sbatch_script

    text = sbatch_script(make_plan(obj(ctx).load()), os.path.basename(output or "job.sbatch"))
    _write(text, output, executable=True, then=f"submit it with `sbatch {output}`")


@export.command("tfjob")
@click.option("-o", "--output", "output", metavar="FILE", type=click.Path(dir_okay=False),
              help="Write the manifest to FILE instead of stdout.")
@click.pass_context
def export_tfjob(ctx: click.Context, output: str | None) -> None:
    """A Kubeflow TFJob (kubeflow.org/v1) for the training operator: a replica spec per type.

    Needs `kubernetes: {image: ...}` in the inventory (also: namespace, name, python, workdir,
    claim, on_failure). What does not carry over is said on stderr.

    \b
    Example:
      tfctl -i examples/beyond-the-lab.yaml export tfjob -o digits-tfjob.yaml
      tfctl -i examples/beyond-the-lab.yaml export tfjob | kubectl apply -f -
    """
    import os

    from tfctl.inventory.plan import make_plan
    from tfctl.remote.engines.tfjob import notes, tfjob_yaml

    plan = make_plan(obj(ctx).load())
    text = tfjob_yaml(plan, os.path.basename(output or "tfjob.yaml"))
    for note in notes(plan):
        click.echo(f"note: {note}", err=True)
    _write(text, output, executable=False, then=f"apply it with `kubectl apply -f {output}`")


def _write(text: str, output: str | None, executable: bool, then: str) -> None:
    if output is None:
        click.echo(text, nl=False)
        return
    from pathlib import Path

    path = Path(output)
    try:
        path.write_text(text)
        if executable:
            path.chmod(path.stat().st_mode | 0o111)
    except OSError as exc:
        raise click.ClickException(f"cannot write {output}: {exc.strerror}") from None
    click.echo(f"wrote {output}: {then}", err=True)
