"""The core loop's commands: `sync`, `up`, `wait`, `status`, `down`."""

from __future__ import annotations

import json
import sys
import time
from typing import TYPE_CHECKING

import click

from tfctl.tui.cli import EXIT_FAILED, obj

if TYPE_CHECKING:
    from tfctl.inventory.model import Inventory
    from tfctl.remote.fleet import Fleet
    from tfctl.remote.runstate import CurrentRun
    from tfctl.remote.status import RunStatus


def _fleet(ctx: click.Context) -> tuple[Inventory, Fleet]:
    from tfctl.remote.fleet import Fleet

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
    from tfctl.remote.sync import sync_all

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
@click.pass_context
def up(ctx: click.Context, no_sync: bool, wait_: bool, start_timeout: float) -> None:
    """Sync, then start every task of the plan (ps first), or roll everything back.

    \b
    Example:
      tfctl -i cluster.yaml up
      tfctl -i cluster.yaml up --wait && echo "job succeeded"
    """
    from tfctl.inventory.plan import make_plan
    from tfctl.remote.launch import launch, new_run_id
    from tfctl.remote.runstate import remember

    inv, fleet = _fleet(ctx)
    plan = make_plan(inv)
    for w in plan.warnings:
        _say(click.style("warning: ", fg="yellow") + w)
    with fleet:
        if not no_sync and inv.job.sync.enabled:
            from tfctl.remote.sync import sync_all

            result = sync_all(fleet, progress=lambda h, m: _say(f"sync {h}: {m}"))
            if result.failed:
                _report_failures(dict(result.failed))
                _say("nothing was started")
                sys.exit(EXIT_FAILED)
        run_id = new_run_id()
        _say(f"run {run_id}")
        launch(fleet, plan, run_id, _say, start_timeout_s=start_timeout)
        remember(inv, run_id, plan.hosts_used)
        _print_status(_read(fleet, run_id, list(plan.hosts_used)))
        click.echo(f"run {run_id} is up · `tfctl logs -f` to follow · `tfctl down` to stop")
        if wait_:
            sys.exit(_wait(fleet, run_id, list(plan.hosts_used)))


def _read(fleet: Fleet, run_id: str, hosts: list[str]) -> RunStatus:
    from tfctl.remote.status import read_status

    return read_status(fleet, run_id, hosts)


def _current(inv: Inventory, fleet: Fleet) -> CurrentRun | None:
    from tfctl.remote.runstate import current_run

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
    from tfctl.remote.status import finalize_if_ended

    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        status = _read(fleet, run_id, hosts)
        if status.job_ended and not status.unreachable:
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
    from tfctl.remote.status import finalize_if_ended

    inv, fleet = _fleet(ctx)
    with fleet:
        run = _current(inv, fleet)
        if run is None:
            click.echo("no run yet: start one with `tfctl up`")
            return
        st = _read(fleet, run.run_id, list(run.hosts))
        stopped = finalize_if_ended(fleet, st, list(run.hosts))
    if as_json:
        click.echo(json.dumps({"run_id": st.run_id, "source": run.source,
                               "job_ended": st.job_ended, "exit_code": st.exit_code,
                               "unreachable": dict(st.unreachable),
                               "tasks": [t.__dict__ for t in st.tasks]}, indent=2))
        return
    click.echo(f"run {st.run_id} (from the {run.source})")
    _print_status(st)
    if stopped:
        click.echo(f"job ended: stopped {', '.join(stopped)}")


def _print_status(st: RunStatus) -> None:
    from tfctl.tui.render import status_table

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
    from tfctl.remote.stop import stop_run

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
