"""`tfctl setup`, and how `up` prints its pre-launch steps (`CliUpHooks`): sync and setup.

Progress goes to stderr (`tfctl: setup h1: [1/2] python3 -m venv .venv`), one summary line per
host to stdout, failures to stderr with the host, the command, its exit status and the last
lines of its log.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

import click

from tfctl.tui.cli.context import EXIT_FAILED, obj
from tfctl.tui.cli.output import report_failures, say, say_event

if TYPE_CHECKING:
    from tfctl.remote.connect.fleet import FleetResult
    from tfctl.remote.errors import RemoteError
    from tfctl.remote.runs.setup import SetupOutcome
    from tfctl.remote.sync.result import SyncResult


class CliUpHooks:
    """Prints what the controller's sync and setup steps did, as `tfctl setup`/`up` always did;
    remembers whether it reported a failure (then the caller says so and exits 1)."""

    def __init__(self) -> None:
        self.reported_failure = False
        self.run_id: str | None = None

    def synced(self, result: FleetResult[SyncResult]) -> None:
        if result.failed:
            report_failures(result.failed.values())
            self.reported_failure = True

    def setup_done(self, result: FleetResult[SetupOutcome], errors: list[RemoteError],
                   seconds: float) -> None:
        for outcome in result.succeeded.values():
            if outcome.ok:
                click.echo(outcome.summary())
        report_failures(errors)
        ran = sum(o.state == "done" for o in result.succeeded.values())
        skipped = sum(o.state == "skipped" for o in result.succeeded.values())
        say(f"setup: {ran} ran, {skipped} skipped, {len(errors)} failed in {seconds:.1f} s")
        self.reported_failure = self.reported_failure or bool(errors)

    def run_started(self, run_id: str) -> None:
        self.run_id = run_id
        say(f"run {run_id}")


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
    from tfctl.remote.errors import RemoteError
    from tfctl.remote.runs.controller import RunController, UpOptions

    c = obj(ctx)
    inv = c.load()
    if not inv.job.setup:
        click.echo("no `job.setup` commands in the inventory: nothing to do")
        return
    hooks = CliUpHooks()
    with RunController(inv, c.ssh_options()) as controller:
        try:
            controller.setup(UpOptions(sync=not no_sync, force_setup=force), say_event,
                             hooks=hooks)
        except RemoteError:
            if not hooks.reported_failure:
                raise
            sys.exit(EXIT_FAILED)
