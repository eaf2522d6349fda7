"""`tfctl setup`, and how it and `up` print their sync and setup steps (`CliUpHooks`,
`step_rows`).

Progress goes to stderr (`tfctl: setup h1: [1/2] python3 -m venv .venv`), one summary line per
host to stdout, failures to stderr with the host, the command, its exit status and the last
lines of its log. On a terminal the same steps also show as live rows (`tfctl.tui.progress`);
with `--json` the summaries go to stderr and stdout gets one JSON object (`setup_json`).
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

import click

from tfctl.tui.cli.context import EXIT_FAILED, obj
from tfctl.tui.cli.output import (
    echo,
    error_line,
    live_steps,
    print_json,
    report_failures,
    say,
    say_event,
)

if TYPE_CHECKING:
    from tfctl.remote.connect.fleet import FleetResult
    from tfctl.remote.controller import RunController, UpOptions
    from tfctl.remote.errors import RemoteError
    from tfctl.remote.runs.setup import SetupOutcome
    from tfctl.remote.sync.result import SyncResult
    from tfctl.tui.progress import Steps


class CliUpHooks:
    """Prints what the controller's sync and setup steps did, for `tfctl setup` and `up`;
    remembers whether it reported a failure (then the caller says so and exits 1), and what the
    steps returned (for `--json`); moves the live rows on (`steps`) when there are some."""

    def __init__(self, as_json: bool = False) -> None:
        self.reported_failure = False
        self.run_id: str | None = None
        self.as_json = as_json
        self.steps: Steps | None = None
        self.sync_result: FleetResult[SyncResult] | None = None
        self.setup_result: FleetResult[SetupOutcome] | None = None
        self.setup_errors: list[RemoteError] = []
        self.setup_seconds = 0.0

    def synced(self, result: FleetResult[SyncResult]) -> None:
        self.sync_result = result
        if self.steps is not None:
            self.steps.step_ended("sync", failed=result.failed)
        if result.failed:
            self._failures(result.failed.values())
            self.reported_failure = True

    def setup_done(self, result: FleetResult[SetupOutcome], errors: list[RemoteError],
                   seconds: float) -> None:
        self.setup_result, self.setup_errors, self.setup_seconds = result, errors, seconds
        if self.steps is not None:
            self.steps.step_ended("setup", failed=[e.host for e in errors])
        for outcome in result.succeeded.values():
            if outcome.ok:
                echo(outcome.summary(), err=self.as_json)  # stdout is for the JSON
        self._failures(errors)
        ran = sum(o.state == "done" for o in result.succeeded.values())
        skipped = sum(o.state == "skipped" for o in result.succeeded.values())
        say(f"setup: {ran} ran, {skipped} skipped, {len(errors)} failed in {seconds:.1f} s")
        self.reported_failure = self.reported_failure or bool(errors)

    def run_started(self, run_id: str) -> None:
        self.run_id = run_id
        if self.steps is not None:
            self.steps.run_started(run_id)
        say(f"run {run_id}")

    def _failures(self, errors: Iterable[RemoteError]) -> None:
        if self.as_json:  # one line each, the output tails stay out of the way
            for exc in errors:
                echo(error_line(exc), err=True)
        else:
            report_failures(errors)


@contextlib.contextmanager
def step_rows(controller: RunController, options: UpOptions, hooks: CliUpHooks, title: str,
              launch: bool) -> Iterator[Callable[[str], None]]:
    """The `on_event` for `controller.up`/`setup`: the plain lines, plus live rows on a terminal
    (not under --json) that the hooks move from step to step, where the engine `up` starts on
    draws some (`launch`) or for `setup`."""
    from tfctl.remote.runs.steps import StepRows, host_steps

    layout = controller.start_steps(options) if launch else \
        host_steps(controller.inventory, options.sync)
    shown = layout or StepRows((), ())
    with live_steps(title, shown.hosts, shown.steps, shown.task_hosts, shown.launch_hosts,
                    enabled=layout is not None and not hooks.as_json) as rows:
        hooks.steps = rows

        def on_event(text: str) -> None:
            if rows is not None:
                rows.event(text)
            say_event(text)

        try:
            yield on_event
        finally:
            hooks.steps = None


def sync_json(result: FleetResult[SyncResult] | None, enabled: bool = True) -> dict[str, Any]:
    """`tfctl sync --json`: per host what was sent (`changed` left out: it can be long)."""
    hosts = {} if result is None else {
        h: {k: v for k, v in asdict(r).items() if k not in ("host", "changed")}
        for h, r in result.succeeded.items()}
    failed = {} if result is None else {h: str(e) for h, e in result.failed.items()}
    return {"ok": not failed, "enabled": enabled, "hosts": hosts, "failed": failed}


def setup_json(hooks: CliUpHooks) -> dict[str, Any]:
    """`tfctl setup --json`: per host its state (done, skipped, failed, not_finished) and why."""
    hosts: dict[str, Any] = {}
    if hooks.setup_result is not None:
        for h, o in hooks.setup_result.succeeded.items():
            hosts[h] = {"state": o.state, "summary": o.summary(),
                        "elapsed_s": round(o.elapsed_s, 3), "commands": list(o.commands),
                        "log_path": o.log_path,
                        "failed_command": o.failed_command, "exit_code": o.exit_code}
    failed = {e.host: str(e) for e in hooks.setup_errors}
    if hooks.sync_result is not None:
        failed.update({h: str(e) for h, e in hooks.sync_result.failed.items()})
    return {"ok": not failed and not hooks.reported_failure, "hosts": hosts, "failed": failed,
            "seconds": round(hooks.setup_seconds, 3),
            "sync": None if hooks.sync_result is None else sync_json(hooks.sync_result)}


@click.command()
@click.option("--force", is_flag=True, help="Run it even where the inputs are unchanged.")
@click.option("--no-sync", is_flag=True, help="Do not sync the code first.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object: each host's "
              "setup state (progress stays on stderr).")
@click.pass_context
def setup(ctx: click.Context, force: bool, no_sync: bool, as_json: bool) -> None:
    """Sync, then run `job.setup` on every host in its workdir, in parallel, launching nothing.

    A host whose commands and `job.setup_inputs` files are unchanged since its last successful
    setup is skipped; the log stays on the host in <workdir>/.tfctl/setup/.

    \b
    Example:
      tfctl -i cluster.yaml setup
      tfctl setup --force        # run it again on every host
      tfctl setup --json | jq -r '.hosts | to_entries[] | "\\(.key) \\(.value.state)"'
    """
    from tfctl.remote.controller import RunController, UpOptions
    from tfctl.remote.errors import RemoteError

    c = obj(ctx)
    inv = c.load()
    if not inv.job.setup:
        if as_json:
            print_json({"ok": True, "hosts": {}, "failed": {}, "seconds": 0.0, "sync": None})
            return
        click.echo("no `job.setup` commands in the inventory: nothing to do")
        return
    hooks = CliUpHooks(as_json)
    options = UpOptions(sync=not no_sync, force_setup=force)
    with RunController(inv, c.ssh_options()) as controller:
        try:
            with step_rows(controller, options, hooks, "tfctl setup", launch=False) as on_event:
                controller.setup(options, on_event, hooks=hooks)
        except RemoteError as exc:
            if not hooks.reported_failure and not as_json:
                raise
            if not hooks.reported_failure:
                echo(error_line(exc), err=True)
            elif as_json:
                print_json(setup_json(hooks))
            sys.exit(EXIT_FAILED)
    if as_json:
        print_json(setup_json(hooks))
