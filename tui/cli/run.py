"""The core loop's commands: `sync`, `up`, `wait`, `status`, `down`.

Ctrl-C or SIGTERM during `up`, before it says "is up", stops whatever this run started, says
what it stopped, and exits 130 (see `_rollback_on_interrupt`); once it is up (`up --wait`) an
interrupt leaves the run running.
"""

from __future__ import annotations

import contextlib
import json
import signal
import sys
from collections.abc import Iterator
from types import FrameType
from typing import TYPE_CHECKING

import click

from tfctl.tui.cli.context import EXIT_FAILED, EXIT_INTERRUPTED, obj
from tfctl.tui.cli.output import report_failures, say, say_event

if TYPE_CHECKING:
    from tfctl.remote.errors import GpusBusy
    from tfctl.remote.runs.controller import RunController
    from tfctl.remote.runs.status import RunStatus
    from tfctl.tui.cli.setup import CliUpHooks


def _controller(ctx: click.Context) -> RunController:
    from tfctl.remote.runs.controller import RunController

    c = obj(ctx)
    return RunController(c.load(), c.ssh_options())


@click.command()
@click.option("--delete", is_flag=True, help="Also delete files in the workdir that the source "
              "no longer has (outputs and run dirs are kept).")
@click.pass_context
def sync(ctx: click.Context, delete: bool) -> None:
    """Copy the job's source folder to every host's workdir (incremental, parallel).

    \b
    Example:
      tfctl -i cluster.yaml sync
    """
    with _controller(ctx) as controller:
        if not controller.inventory.job.sync.enabled:
            say("sync is off in the inventory (`sync: false`)")
            return
        result = controller.sync_report(delete=delete, on_event=say)
    for host, r in result.succeeded.items():
        note = f" ({r.note})" if r.note else ""
        click.echo(f"{host}: {r.method} {r.files_transferred} files, {r.bytes_transferred} bytes"
                   f" → {r.dest}{note}")
    if result.failed:
        report_failures(result.failed.values())
        sys.exit(EXIT_FAILED)


@click.command()
@click.option("--no-sync", is_flag=True, help="Do not sync the code first.")
@click.option("--wait", "wait_", is_flag=True, help="Block until the job ends; exit with its "
              "status.")
@click.option("--start-timeout", type=float, default=180.0, show_default=True,
              help="Seconds a task may take to start listening on its port.")
@click.option("--setup", "force_setup", is_flag=True, help="Run job.setup on every host even "
              "where its inputs are unchanged.")
@click.option("--force", is_flag=True, help="Launch even onto GPUs other processes use.")
@click.option("--ps-first", is_flag=True, help="Start the parameter servers first and the "
              "rest only once they listen (the order of the old tutorials); by default every "
              "task starts at once, since TensorFlow's workers and chief wait for their ps.")
@click.option("--all-at-once", is_flag=True, hidden=True,
              help="The default now; kept so that scripts written for it still run.")
@click.pass_context
def up(ctx: click.Context, no_sync: bool, wait_: bool, start_timeout: float, force_setup: bool,
       force: bool, ps_first: bool, all_at_once: bool) -> None:
    """Sync, run job.setup (cached), check the GPUs are free, start every task at once.

    On any failure everything started is stopped again. GPUs in use by other processes are
    refused unless --force.

    \b
    Example:
      tfctl -i cluster.yaml up
      tfctl -i cluster.yaml up --wait && echo "job succeeded"
    """
    from tfctl.remote.errors import GpusBusy, RemoteError
    from tfctl.remote.runs.controller import UpOptions
    from tfctl.tui.cli.setup import CliUpHooks

    options = UpOptions(sync=not no_sync, force_setup=force_setup, force=force,
                        ps_first=ps_first and not all_at_once, start_timeout_s=start_timeout)
    hooks = CliUpHooks()
    controller = _controller(ctx)
    with controller, _rollback_on_interrupt(controller, hooks) as guard:
        try:
            run_id = controller.up(options, say_event, hooks=hooks)
        except GpusBusy as exc:
            _refuse_busy(exc)
            say("nothing was started")
            sys.exit(EXIT_FAILED)
        except RemoteError:
            if hooks.run_id is not None or not hooks.reported_failure:
                raise
            say("nothing was started")  # sync or setup failed, and said how
            sys.exit(EXIT_FAILED)
        assert controller.up_status is not None
        _print_status(controller.up_status)
        click.echo(f"run {run_id} is up · `tfctl logs -f` to follow · `tfctl down` to stop")
        guard.is_up = True
        if wait_:
            sys.exit(_wait(controller))


def _refuse_busy(exc: GpusBusy) -> None:
    click.secho("error: GPUs the plan assigns are in use by other processes:", fg="red",
                err=True)
    for line in exc.holders:
        click.secho(f"  ✖ {line}", fg="red", err=True)
    click.echo(f"free GPUs instead: {exc.free}", err=True)
    click.echo("select free GPUs with `gpus: [...]` for those hosts in the inventory, or run "
               "`tfctl up --force` to launch anyway", err=True)


class _UpGuard:
    """How far `up` got, for its interrupt handler. The first SIGINT/SIGTERM raises
    KeyboardInterrupt; later ones are ignored until the run is up, so a second Ctrl-C cannot
    cut the rollback short and leave half a job behind."""

    def __init__(self, hooks: CliUpHooks) -> None:
        self.hooks = hooks
        self.is_up = False
        self.signals = 0

    @property
    def run_id(self) -> str | None:
        """The run id `up` chose (set just before any task starts), or None."""
        return self.hooks.run_id

    def on_signal(self, signum: int, frame: FrameType | None) -> None:
        self.signals += 1
        if self.signals == 1 or self.is_up:
            raise KeyboardInterrupt


@contextlib.contextmanager
def _rollback_on_interrupt(controller: RunController, hooks: CliUpHooks) -> Iterator[_UpGuard]:
    """Ctrl-C/SIGTERM before the run is up: stop what it started, say so, exit 130."""
    from tfctl.remote.runs.launch import Interrupted

    guard = _UpGuard(hooks)
    previous = {sig: signal.signal(sig, guard.on_signal) for sig in (signal.SIGINT,
                                                                      signal.SIGTERM)}
    try:
        yield guard
    except KeyboardInterrupt as exc:
        if guard.is_up:
            say(f"interrupted: run {guard.run_id} keeps running · `tfctl down` stops it")
        elif guard.run_id is None:
            say("interrupted before any task was started: nothing to clean up")
        elif not isinstance(exc, Interrupted):  # else launch rolled back and said so
            say(f"interrupted: {controller.rollback(guard.run_id)}")
        sys.exit(EXIT_INTERRUPTED)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


@click.command()
@click.option("--timeout", type=float, default=None, help="Give up after this many seconds.")
@click.pass_context
def wait(ctx: click.Context, timeout: float | None) -> None:
    """Block until the current job ends; stop its parameter servers; exit with its status.

    \b
    Example:
      tfctl up && tfctl wait; echo "job exit status $?"
    """
    with _controller(ctx) as controller:
        sys.exit(_wait(controller, timeout))


def _wait(controller: RunController, timeout: float | None = None) -> int:
    result = controller.wait(timeout)
    if result is None:
        say("no run found")
        return EXIT_FAILED
    if result.timed_out:
        say(f"run {result.run_id} still running after {timeout:g} s")
        return EXIT_FAILED
    if result.fatal is not None:
        say(click.style(result.fatal, fg="red"))
    if result.stopped:
        say(f"job ended: stopped {', '.join(result.stopped)}")
    say(f"run {result.run_id} finished with exit status {result.exit_code}")
    return int(result.exit_code or 0)


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option("--run", "run_id", metavar="ID", help="Another run than the current one "
              "(`tfctl runs` lists them).")
@click.pass_context
def status(ctx: click.Context, as_json: bool, run_id: str | None) -> None:
    """Every task of the current run (or `--run ID`), read live from the hosts.

    \b
    Example:
      tfctl status
      tfctl status --json | jq '.tasks[] | select(.state != "running")'
    """
    from tfctl.remote.runs.failure import explain
    from tfctl.remote.runs.status import describe_fatal

    with _controller(ctx) as controller:
        if run_id:
            controller.select_run(run_id)
        report = controller.status_report(tail=STATUS_TAIL_LINES)
    if report is None:
        click.echo("no run yet: start one with `tfctl up`")
        return
    st, run, stopped = report.status, report.run, list(report.stopped)
    fatal = describe_fatal(st.fatal) if st.fatal is not None else None
    if as_json:
        click.echo(json.dumps({"run_id": st.run_id, "source": run.source,
                               "job_ended": st.job_ended, "exit_code": st.exit_code,
                               "fatal": fatal, "stopped": stopped,
                               "unreachable": dict(st.unreachable),
                               "tasks": [t.__dict__ for t in st.tasks]}, indent=2))
        return
    click.echo(f"run {st.run_id} (from the {run.source})")
    _print_status(st)
    for t in st.tasks:  # how each failed task ended, in its own words: the error line first
        if t.failed and t.last_lines:
            failure = explain(t.last_lines, keep=STATUS_TAIL_LINES)
            click.echo(f"{t.name} on {t.host} {t.describe()}; its log says:")
            click.echo("".join(f"  {t.name} | {line}\n" for line in failure.lines), nl=False)
            if failure.hint:
                click.echo(f"  hint: {failure.hint}")
    if fatal:
        click.secho(fatal, fg="red", bold=True)
    if stopped:
        click.echo(f"job ended: stopped {', '.join(stopped)}")


STATUS_TAIL_LINES = 5


def _print_status(st: RunStatus) -> None:
    from tfctl.tui.cli.output import status_table

    status_table(st)


@click.command()
@click.option("--grace", type=float, default=10.0, show_default=True,
              help="Seconds between SIGTERM and SIGKILL.")
@click.pass_context
def down(ctx: click.Context, grace: float) -> None:
    """Stop exactly the current run's processes on every host (TERM, grace, KILL, verify).

    \b
    Example:
      tfctl down
      tfctl down --grace 2
    """
    with _controller(ctx) as controller:
        summary = controller.down(grace_s=grace)
    if summary.run_id is None:
        click.echo("nothing to stop: no run found")
        return
    killed = summary.killed_after_grace
    if summary.stopped:
        click.echo(f"run {summary.run_id}: stopped {', '.join(summary.stopped)}"
                   + (f" (SIGKILL after {grace:g} s: {', '.join(killed)})" if killed else ""))
    elif not summary.errors:
        click.echo(f"run {summary.run_id}: nothing to stop (already down)")
    for host, r in summary.problems.items():
        click.secho(f"  ✖ {host}: still alive after SIGKILL: pids {list(r.remaining_pids)}; "
                    f"holding GPU memory: {list(r.gpu_pids)}", fg="red", err=True)
    if summary.errors:
        report_failures(summary.errors.values())
        click.secho("run `tfctl down` again once those hosts are back", fg="red", err=True)
    if summary.errors or summary.problems:
        sys.exit(EXIT_FAILED)
