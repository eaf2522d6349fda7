"""`tfctl setup`, and the two pre-launch steps `up` shares with it: setup and the busy-GPU check.

Progress goes to stderr (`tfctl: setup h1: [1/2] python3 -m venv .venv`), one summary line per
host to stdout, failures to stderr with the host, the command, its exit status and the last
lines of its log.
"""

from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING

import click

from tfctl.tui.cli.main import EXIT_FAILED, obj

if TYPE_CHECKING:
    from tfctl.inventory.plan import Plan
    from tfctl.remote.connect.fleet import Fleet, FleetResult
    from tfctl.remote.runs.setup import SetupOutcome


def _say(text: str) -> None:
    click.echo(click.style("tfctl: ", fg="cyan") + text, err=True)


def run_setup_step(fleet: Fleet, force: bool) -> tuple[FleetResult[SetupOutcome], bool]:
    """Run `job.setup` everywhere, print per host how it went; (result, every host ok)."""
    from tfctl.remote.runs.setup import run_setup, setup_errors

    job = fleet.inventory.job
    if not job.setup:
        from tfctl.remote.connect.fleet import FleetResult

        return FleetResult({}, {}), True
    started = time.monotonic()
    result = run_setup(fleet, force=force, progress=lambda h, m: _say(f"setup {h}: {m}"))
    for outcome in result.succeeded.values():
        if outcome.ok:
            click.echo(outcome.summary())
    errors = setup_errors(result)
    for exc in errors:
        click.secho(f"  ✖ {exc.full()}", fg="red", err=True)
    ran = sum(o.state == "done" for o in result.succeeded.values())
    skipped = sum(o.state == "skipped" for o in result.succeeded.values())
    _say(f"setup: {ran} ran, {skipped} skipped, {len(errors)} failed "
         f"in {time.monotonic() - started:.1f} s")
    return result, not errors


def busy_gpu_step(fleet: Fleet, plan: Plan, force: bool) -> bool:
    """Report other processes on the plan's GPUs; False (refuse) unless `force` or none."""
    from tfctl.remote.gpus.busy import find_busy_gpus

    report = find_busy_gpus(fleet, plan)
    for line in report.unknown_lines():
        _say(click.style("warning: ", fg="yellow") + line)
    if not report.busy:
        return True
    if force:
        _say(click.style("warning: ", fg="yellow") + "launching anyway (--force) onto GPUs "
             "in use: " + "; ".join(report.busy_lines()))
        return True
    click.secho("error: GPUs the plan assigns are in use by other processes:", fg="red",
                err=True)
    for line in report.busy_lines():
        click.secho(f"  ✖ {line}", fg="red", err=True)
    click.echo(f"free GPUs instead: {report.free_text()}", err=True)
    click.echo("select free GPUs with `gpus: [...]` for those hosts in the inventory, or run "
               "`tfctl up --force` to launch anyway", err=True)
    return False


@click.command()
@click.option("--force", is_flag=True, help="Run it even where the inputs are unchanged.")
@click.option("--no-sync", is_flag=True, help="Do not sync the code first.")
@click.pass_context
def setup(ctx: click.Context, force: bool, no_sync: bool) -> None:
    """Sync, then run `job.setup` on every host in its workdir, in parallel, launching nothing.

    A host whose commands and `job.setup_inputs` files are unchanged since its last successful
    setup is skipped; the log stays on the host in <workdir>/.tfctl/setup/.

    \b
    Example:
      tfctl -i cluster.yaml setup
      tfctl setup --force        # run it again on every host
    """
    from tfctl.remote.connect.fleet import Fleet

    c = obj(ctx)
    inv = c.load()
    if not inv.job.setup:
        click.echo("no `job.setup` commands in the inventory: nothing to do")
        return
    with Fleet(inv, c.ssh_options()) as fleet:
        if not no_sync and inv.job.sync.enabled:
            from tfctl.remote.sync.rsync import sync_all

            synced = sync_all(fleet, progress=lambda h, m: _say(f"sync {h}: {m}"))
            for exc in synced.failed.values():
                click.secho(f"  ✖ {exc.full()}", fg="red", err=True)
            if synced.failed:
                sys.exit(EXIT_FAILED)
        _, ok = run_setup_step(fleet, force)
    if not ok:
        sys.exit(EXIT_FAILED)
