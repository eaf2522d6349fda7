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
import time
from collections.abc import Iterator
from types import FrameType
from typing import TYPE_CHECKING

import click

from tfctl.tui.cli.main import EXIT_FAILED, EXIT_INTERRUPTED, obj

if TYPE_CHECKING:
    from tfctl.inventory.model import Inventory
    from tfctl.inventory.plan import Plan
    from tfctl.remote.connect.fleet import Fleet
    from tfctl.remote.runs.current import CurrentRun
    from tfctl.remote.runs.status import RunStatus


def _fleet(ctx: click.Context) -> tuple[Inventory, Fleet]:
    from tfctl.remote.connect.fleet import Fleet

    c = obj(ctx)
    inv = c.load()
    return inv, Fleet(inv, c.ssh_options())


def _say(text: str) -> None:
    click.echo(click.style("tfctl: ", fg="cyan") + text, err=True)


def _report_failures(failed: dict[str, object]) -> None:
    for exc in failed.values():
        full = getattr(exc, "full", None)
        click.secho(f"  ✖ {full() if callable(full) else exc}", fg="red", err=True)


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
    from tfctl.remote.sync.rsync import sync_all

    inv, fleet = _fleet(ctx)
    if not inv.job.sync.enabled:
        _say("sync is off in the inventory (`sync: false`)")
        return
    with fleet:
        result = sync_all(fleet, delete=delete, progress=lambda h, m: _say(f"{h}: {m}"))
    for host, r in result.succeeded.items():
        note = f" ({r.note})" if r.note else ""
        click.echo(f"{host}: {r.method} {r.files_transferred} files, {r.bytes_transferred} bytes"
                   f" → {r.dest}{note}")
    if result.failed:
        _report_failures(dict(result.failed))
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
@click.option("--all-at-once", is_flag=True, help="Start every task at once rather than the "
              "parameter servers first: workers and chief wait for them, and the job starts in "
              "one TensorFlow import instead of two.")
@click.pass_context
def up(ctx: click.Context, no_sync: bool, wait_: bool, start_timeout: float, force_setup: bool,
       force: bool, all_at_once: bool) -> None:
    """Sync, run job.setup (cached), check the GPUs are free, start every task (ps first).

    On any failure everything started is stopped again. GPUs in use by other processes are
    refused unless --force.

    \b
    Example:
      tfctl -i cluster.yaml up
      tfctl -i cluster.yaml up --wait && echo "job succeeded"
    """
    from tfctl.inventory.plan import make_plan
    from tfctl.remote.runs.current import remember
    from tfctl.remote.runs.launch import launch, new_run_id
    from tfctl.remote.runs.setup import attach_logs
    from tfctl.tui.cli.setup import busy_gpu_step, run_setup_step

    inv, fleet = _fleet(ctx)
    plan = make_plan(inv)
    for w in plan.warnings:
        _say(click.style("warning: ", fg="yellow") + w)
    with fleet, _rollback_on_interrupt(fleet, plan) as guard:
        if not no_sync and inv.job.sync.enabled:
            from tfctl.remote.sync.rsync import sync_all

            result = sync_all(fleet, progress=lambda h, m: _say(f"sync {h}: {m}"))
            if result.failed:
                _report_failures(dict(result.failed))
                _say("nothing was started")
                sys.exit(EXIT_FAILED)
        setup_result, setup_ok = run_setup_step(fleet, force_setup)
        if not setup_ok or not busy_gpu_step(fleet, plan, force):
            _say("nothing was started")
            sys.exit(EXIT_FAILED)
        run_id = guard.run_id = new_run_id()
        _say(f"run {run_id}")
        launch(fleet, plan, run_id, _say, start_timeout_s=start_timeout, ps_first=not all_at_once)
        remember(inv, run_id, plan.hosts_used)
        attach_logs(fleet, run_id, setup_result)
        _print_status(_read(fleet, run_id, list(plan.hosts_used), mark_up=True))
        click.echo(f"run {run_id} is up · `tfctl logs -f` to follow · `tfctl down` to stop")
        guard.is_up = True
        if wait_:
            sys.exit(_wait(fleet, run_id, list(plan.hosts_used)))


class _UpGuard:
    """How far `up` got, for its interrupt handler. The first SIGINT/SIGTERM raises
    KeyboardInterrupt; later ones are ignored until the run is up, so a second Ctrl-C cannot
    cut the rollback short and leave half a job behind."""

    def __init__(self) -> None:
        self.run_id: str | None = None
        self.is_up = False
        self.signals = 0

    def on_signal(self, signum: int, frame: FrameType | None) -> None:
        self.signals += 1
        if self.signals == 1 or self.is_up:
            raise KeyboardInterrupt


@contextlib.contextmanager
def _rollback_on_interrupt(fleet: Fleet, plan: Plan) -> Iterator[_UpGuard]:
    """Ctrl-C/SIGTERM before the run is up: stop what it started, say so, exit 130."""
    from tfctl.remote.runs.launch import Interrupted, rollback

    guard = _UpGuard()
    previous = {sig: signal.signal(sig, guard.on_signal) for sig in (signal.SIGINT,
                                                                      signal.SIGTERM)}
    try:
        yield guard
    except KeyboardInterrupt as exc:
        if guard.is_up:
            _say(f"interrupted: run {guard.run_id} keeps running · `tfctl down` stops it")
        elif guard.run_id is None:
            _say("interrupted before any task was started: nothing to clean up")
        elif not isinstance(exc, Interrupted):  # else launch rolled back and said so
            _say(f"interrupted: {rollback(fleet, plan, guard.run_id)}")
        sys.exit(EXIT_INTERRUPTED)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _read(fleet: Fleet, run_id: str, hosts: list[str], mark_up: bool = False) -> RunStatus:
    from tfctl.remote.runs.status import read_status

    return read_status(fleet, run_id, hosts, mark_up=mark_up)


def _current(inv: Inventory, fleet: Fleet) -> CurrentRun | None:
    from tfctl.remote.runs.current import current_run

    return current_run(inv, fleet)


@click.command()
@click.option("--timeout", type=float, default=None, help="Give up after this many seconds.")
@click.pass_context
def wait(ctx: click.Context, timeout: float | None) -> None:
    """Block until the current job ends; stop its parameter servers; exit with its status.

    \b
    Example:
      tfctl up && tfctl wait; echo "job exit status $?"
    """
    inv, fleet = _fleet(ctx)
    with fleet:
        run = _current(inv, fleet)
        if run is None:
            _say("no run found")
            sys.exit(EXIT_FAILED)
        sys.exit(_wait(fleet, run.run_id, list(run.hosts), timeout))


def _wait(fleet: Fleet, run_id: str, hosts: list[str], timeout: float | None = None) -> int:
    from tfctl.remote.runs.status import describe_fatal, finalize_if_ended

    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        status = _read(fleet, run_id, hosts)
        if status.job_ended and not status.unreachable:
            if status.fatal is not None:
                _say(click.style(describe_fatal(status.fatal), fg="red"))
            stopped = finalize_if_ended(fleet, status, hosts)
            if stopped:
                _say(f"job ended: stopped {', '.join(stopped)}")
            _say(f"run {run_id} finished with exit status {status.exit_code}")
            return status.exit_code
        if deadline is not None and time.monotonic() > deadline:
            _say(f"run {run_id} still running after {timeout:g} s")
            return EXIT_FAILED
        time.sleep(1.0)


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_context
def status(ctx: click.Context, as_json: bool) -> None:
    """Every task of the current run, read live from the hosts.

    \b
    Example:
      tfctl status
      tfctl status --json | jq '.tasks[] | select(.state != "running")'
    """
    from tfctl.remote.runs.status import describe_fatal, finalize_if_ended, read_status

    inv, fleet = _fleet(ctx)
    with fleet:
        run = _current(inv, fleet)
        if run is None:
            click.echo("no run yet: start one with `tfctl up`")
            return
        st = read_status(fleet, run.run_id, list(run.hosts), tail=STATUS_TAIL_LINES)
        stopped = finalize_if_ended(fleet, st, list(run.hosts))
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
    for t in st.tasks:  # how each failed task ended, in its own words
        if t.failed and t.last_lines:
            click.echo(f"{t.name} on {t.host} {t.describe()}; its last lines:")
            click.echo("".join(f"  {t.name} | {line}\n" for line in t.last_lines), nl=False)
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
    from tfctl.remote.runs.stop import stop_run

    inv, fleet = _fleet(ctx)
    with fleet:
        run = _current(inv, fleet)
        if run is None:
            click.echo("nothing to stop: no run found")
            return
        result = stop_run(fleet, run.run_id, run.hosts, grace_s=grace)
    stopped = sorted(n for r in result.succeeded.values() for n in r.get("stopped", []))
    killed = sorted(n for r in result.succeeded.values() for n in r.get("killed_after_grace", []))
    problems = [(h, r) for h, r in result.succeeded.items()
                if r.get("remaining_pids") or r.get("gpu_pids")]
    if stopped:
        click.echo(f"run {run.run_id}: stopped {', '.join(stopped)}"
                   + (f" (SIGKILL after {grace:g} s: {', '.join(killed)})" if killed else ""))
    elif not result.failed:
        click.echo(f"run {run.run_id}: nothing to stop (already down)")
    for host, r in problems:
        click.secho(f"  ✖ {host}: still alive after SIGKILL: pids {r.get('remaining_pids')}; "
                    f"holding GPU memory: {r.get('gpu_pids')}", fg="red", err=True)
    if result.failed:
        _report_failures(dict(result.failed))
        click.secho("run `tfctl down` again once those hosts are back", fg="red", err=True)
    if result.failed or problems:
        sys.exit(EXIT_FAILED)
