"""`tfctl run`: a one-off command on free GPUs of the lab, or a sweep of them (`--each`).

The command line reads the options and the points (inventory/oneoff.py); the library prepares
the hosts, places and starts what it can now and queues the rest in a sweep with a waiter of its
own (remote/queue/startrun.py), and this module says what it did. Every point is a run:
`status`, `logs`, `wait`, `down`, `report` and `collect` take its `--run ID`; `down --run` with
the sweep's id stops the whole sweep (`down_sweep`).
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, NoReturn

import click

from tfctl.tui.cli.context import EXIT_FAILED, EXIT_USAGE, complete_hosts, obj
from tfctl.tui.cli.output import echo, error_line, print_json, say, say_event, secho

if TYPE_CHECKING:
    from tfctl.inventory.model import Inventory
    from tfctl.inventory.oneoff import Point
    from tfctl.remote.queue.record import WaitingPoint
    from tfctl.remote.queue.startrun import RunStarted


def _fail(text: str, code: int = EXIT_USAGE) -> NoReturn:
    secho(f"error: {text}", err=True, fg="red")
    sys.exit(code)


@click.command(context_settings={"allow_interspersed_args": False})
@click.option("--gpus", "gpus_each", type=click.IntRange(min=0), default=1, show_default=True,
              help="GPUs the command gets, all on one host (0: CPU only).")
@click.option("--host", metavar="HOST", shell_complete=complete_hosts,
              help="Run on this host only (default: wherever GPUs are free).")
@click.option("--each", multiple=True, metavar="KEY=V1,V2,...",
              help="A sweep: one run per value, `{KEY}` in the command replaced by it; "
                   "repeatable (the product of the lists). Points without free GPUs wait.")
@click.option("--when-free", is_flag=True, help="Wait for free GPUs instead of refusing when "
              "there are none now; the wait goes on after this terminal closes, on this "
              "machine (as `up --when-free`'s).")
@click.option("--timeout", "wait_timeout", metavar="D", default=None,
              help="How long waiting points wait for GPUs (`12h`, the default; `3d`, `90m`).")
@click.option("--name", metavar="NAME", help="A name for the run (or sweep), shown by `runs` "
              "and `tfctl queue`.")
@click.option("--no-sync", is_flag=True, help="Do not sync the code first.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object on stdout "
              "(progress stays on stderr).")
@click.argument("command", nargs=-1, type=click.UNPROCESSED, metavar="-- CMD [ARGS]...")
@click.pass_context
def run(ctx: click.Context, gpus_each: int, host: str | None, each: tuple[str, ...],
        when_free: bool, wait_timeout: str | None, name: str | None, no_sync: bool,
        as_json: bool, command: tuple[str, ...]) -> None:
    """Run a command on N free GPUs of one host, with the inventory's workdir, python, env,
    setup and sync; a sweep with --each.

    The GPUs are chosen as `gpus: free` chooses them (never one another user holds or
    reserved, never a busy one) and claimed; CMD runs in the synced workdir with
    CUDA_VISIBLE_DEVICES set, a leading `python` being the host's `python:`. It is a run like
    any other: `status`, `logs`, `wait`, `down`, `report`, `collect` take `--run ID`, and
    `runs`, `lab` and the dashboard show it. A sweep starts one point per free set of N GPUs
    anywhere in the lab; the rest wait in the queue (`tfctl queue`) and start as GPUs free,
    first come first served; `tfctl down --run SWEEP` stops it.

    \b
    Example:
      tfctl run -- python train.py --epochs 3
      tfctl run --gpus 2 --host titan -- python train.py
      tfctl run --gpus 0 -- sh -c 'du -sh data'
      tfctl run --each seed=1,2,3 --each lr=0.1,0.01 -- python train.py --seed {seed} --lr {lr}
      tfctl run --when-free --json -- python train.py | jq -r .points[0].run_id
    """
    from tfctl.inventory.oneoff import OneOffError, parse_each, points, too_many_gpus
    from tfctl.remote.lab.targets import parse_duration

    c = obj(ctx)
    inv = c.load()
    if host is not None and host not in {h.name for h in inv.hosts}:
        raise click.BadParameter(f"{host!r} is not a host of {inv.path}; its hosts are "
                                 f"{', '.join(h.name for h in inv.hosts)}", ctx=ctx,
                                 param_hint="'--host'")
    try:
        found = points(list(command), parse_each(each))
    except OneOffError as exc:
        _fail(str(exc))
    too_many = too_many_gpus(inv, gpus_each, host=host)
    if too_many:
        _fail(too_many)
    queues = when_free or len(found) > 1
    if wait_timeout is not None and not queues:
        raise click.UsageError("--timeout is for points that wait: give --when-free (or "
                               "--each for a sweep)")
    try:
        timeout_s = parse_duration(wait_timeout or "12h")
    except ValueError as exc:
        raise click.BadParameter(str(exc), ctx=ctx, param_hint="'--timeout'") from None
    _run(ctx, inv, found, gpus_each, host, queues, timeout_s, name, not no_sync, as_json)


def _run(ctx: click.Context, inv: Inventory, found: list[Point], gpus_each: int,
         host: str | None, queues: bool, timeout_s: float, name: str | None, sync: bool,
         as_json: bool) -> None:
    from tfctl.remote.queue.startrun import RunRefused, start_run
    from tfctl.tui.cli.queue import origin
    from tfctl.tui.cli.setup import CliUpHooks

    try:
        done = start_run(inv, origin(ctx, inv.path), found, gpus_each, host, queues, timeout_s,
                         name, sync, say_event, say, CliUpHooks(as_json))
    except RunRefused as exc:
        _fail(str(exc), EXIT_USAGE if exc.usage else EXIT_FAILED)
    _said(found, done, as_json)


def _said(found: list[Point], done: RunStarted, as_json: bool) -> None:
    """What came of it: the points started, failed and queued (the waiter started for those)."""
    from tfctl.remote.oneoff import where

    started, failed = done.by_state("started"), done.by_state("failed")
    waiting = done.by_state("waiting")
    sweep_id, record = done.sweep_id, done.record
    where_started = " ".join(where(e.gpus or (), e.host or "") for e in started)
    decision = (f"{len(found)} point{'s' if len(found) != 1 else ''}: {len(started)} started"
                + (f" on {where_started}" if started else "")
                + (f", {len(failed)} failed" if failed else "")
                + (f", {len(waiting)} queued" if waiting else ""))
    if as_json:
        entries = [p.to_json() for p in done.points]
        print_json({"sweep": sweep_id, "decision": decision,
                    "run_id": entries[0]["run_id"] if len(entries) == 1 else None, "points": [
            {k: e.get(k) for k in ("index", "values", "argv", "state", "host", "gpus",
                                   "run_id", "ended", "why")} for e in entries],
            "waiter_pid": None if record is None else record.waiter_pid,
            "log": None if record is None else record.log})
        for e in failed:
            echo(error_line(e.why), err=True)
    else:
        _told(found, done, decision, waiting)
    results = done.results
    ended_badly = sweep_id is None and bool(results) and results[0].task is not None \
        and results[0].task.failed
    if failed or ended_badly:
        sys.exit(EXIT_FAILED)


def _told(found: list[Point], done: RunStarted, decision: str,
          waiting: list[WaitingPoint]) -> None:
    from tfctl.tui.cli.output import report_failures

    results, sweep_id, record = done.results, done.sweep_id, done.record
    if len(found) == 1 and sweep_id is None:
        e = done.points[0]
        task = results[0].task if results else None
        if e.state == "started" and task is not None and task.failed:
            from tfctl.tui.cli.failures import task_story

            for line in task_story(task):
                echo(line, err=True)
            secho(f"run {e.run_id} ended at once: {task.describe()}", err=True, fg="red")
            return
        if e.state == "started":
            from tfctl.remote.oneoff import where

            ended = f" and ended ({task.describe()})" if task is not None and task.ended else ""
            click.echo(f"run {e.run_id} started on {where(e.gpus or (), e.host or '')}{ended}: "
                       f"{e.words} · `tfctl logs -f --run {e.run_id}` to follow · "
                       f"`tfctl down --run {e.run_id}` to stop")
        else:
            report_failures([r.error for r in results if r.error is not None])
        return
    click.echo(f"sweep {sweep_id}: {decision}" if len(found) > 1 else
               f"{sweep_id}: {decision}")
    for line in done.lines:
        click.echo(f"  {line}")
    for e in waiting:
        click.echo(f"  {e.words}: queued")
    if record is not None and waiting:
        click.echo(f"the queued points wait in the background on this machine (pid "
                   f"{record.waiter_pid}, log {record.log}): closing the terminal does "
                   f"not stop them · `tfctl queue` lists them · `tfctl down --run {sweep_id}` "
                   "stops the sweep")
    elif sweep_id is not None:
        click.echo(f"`tfctl runs` gives each point's exit status · `tfctl down --run "
                   f"{sweep_id}` stops the sweep")


def down_sweep(ctx: click.Context, sweep_id: str, grace_s: float, as_json: bool) -> None:
    """`down --run SWEEP`: the sweep's running points stopped (each as `down --run`), its
    waiting ones cancelled."""
    from tfctl.remote.queue.record import read
    from tfctl.remote.queue.sweep import stop_sweep

    job = read(sweep_id)
    if job is None or job.kind != "sweep":
        _fail(f"no sweep {sweep_id} was started from here (`tfctl queue` lists this "
              "machine's; `tfctl runs` each point's run)")
        return
    done = stop_sweep(job, grace_s, obj(ctx).ssh_options())
    if as_json:
        print_json({"sweep": sweep_id, "stopped": done.stopped, "cancelled": done.cancelled,
                    "errors": done.errors, "clean": not done.errors})
    else:
        for run_id, tasks in done.stopped.items():
            echo(f"run {run_id}: " + (f"stopped {', '.join(tasks)}" if tasks else
                                     "nothing to stop (already ended)"))
        echo(f"sweep {sweep_id}: {len(done.stopped)} point runs stopped or ended, "
             f"{len(done.cancelled)} waiting points cancelled")
        for run_id, why in done.errors.items():
            secho(f"  ✖ run {run_id}: {why}", err=True, fg="red")
    if done.errors:
        sys.exit(EXIT_FAILED)
