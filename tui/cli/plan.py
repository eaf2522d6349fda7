"""`tfctl plan`: what would run where, with which mask and command line; nothing is contacted."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import click

from tfctl.tui.cli.context import obj

if TYPE_CHECKING:
    from tfctl.inventory.model import Inventory


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Print the plan as JSON (tasks + cluster).")
@click.option("--now", is_flag=True, help="Ask the `gpus: free` hosts which GPUs `up` would "
              "take now (one request to each of those hosts; no other host is contacted).")
@click.pass_context
def plan(ctx: click.Context, as_json: bool, now: bool) -> None:
    """Show every task of the job: host, port, GPU mask, env and exact command.

    The cluster spec names each host as the other hosts reach it: its `cluster_address`, else
    the HostName its ssh config gives an alias (nothing is contacted). A host written
    `gpus: free` shows `free`: its GPUs are chosen at `up`; `--now` asks it which they would be.

    \b
    Example:
      tfctl -i examples/two-hosts.yaml plan
      tfctl -i examples/two-hosts.yaml plan --json | jq '.tasks[].command'
      tfctl plan --now --json | jq .free_gpus     # the GPUs `gpus: free` would take now
    """
    from tfctl.inventory.plan import make_plan
    from tfctl.remote.connect.clusteraddr import cluster_address

    inv = obj(ctx).load()
    free: dict[str, dict[str, Any]] = {
        h.name: {"count": h.free_gpus.count, "now": None, "taken": [], "error": None}
        for h in inv.hosts if h.free_gpus is not None}
    if now and free:
        inv = _free_now(ctx, inv, free)
    p = make_plan(inv, reach=cluster_address)  # ssh aliases as the hosts know them
    if as_json:
        data = p.to_json()
        data["free_gpus"] = free
        click.echo(json.dumps(data, indent=2))
        return
    from tfctl.tui.cli.output import plan_table

    plan_table(p)
    for host, found in free.items():
        if now:
            taken = "; ".join(found["taken"])
            gpus = found["now"]
            said = (f"GPUs {', '.join(map(str, gpus))} free now" if gpus
                    else f"too few free GPUs now ({found['error'] or 'all taken'})")
            click.echo(f"{host}: {said}" + (f"; {taken}" if taken else ""))


def _free_now(ctx: click.Context, inv: Inventory, free: dict[str, dict[str, Any]]
              ) -> Inventory:
    """The inventory on the GPUs its `gpus: free` hosts would take now; `free` filled in."""
    from tfctl.remote.connect.fleet import Fleet
    from tfctl.remote.lab.freegpus import choose, read_free, with_gpus

    with Fleet(inv, obj(ctx).ssh_options()) as fleet:
        found = read_free(fleet, list(free))
    chosen = {}
    for host, seen in found.items():
        wanted = inv.host(host).free_gpus
        assert wanted is not None
        took = choose(wanted, seen)
        free[host].update(now=None if took is None else list(took), taken=list(seen.taken),
                          error=seen.error or (None if took else
                                               f"free: {list(seen.free)}"))
        if took is not None:
            chosen[host] = took
    return with_gpus(inv, chosen)


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
    from tfctl.remote.exporters.slurm import sbatch_script

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
    from tfctl.remote.exporters.tfjob import notes, tfjob_yaml

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
