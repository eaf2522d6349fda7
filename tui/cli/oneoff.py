"""`tfctl run`: a one-off command on free GPUs of the lab, or a sweep of them (`--each`).

The command line reads the options and the points (inventory/oneoff.py), prepares the hosts,
places and starts what it can now and queues the rest (remote/oneoff.py, remote/lab/points.py),
and leaves the waiting points to a waiter of their own (tui/cli/sweep.py). Every point is a run:
`status`, `logs`, `wait`, `down`, `report` and `collect` take its `--run ID`; `down --run` with
the sweep's id stops the whole sweep.
"""

from __future__ import annotations

import socket
import sys
import time
from typing import TYPE_CHECKING, Any

import click

from tfctl.tui.cli.context import EXIT_FAILED, EXIT_USAGE, complete_hosts, obj
from tfctl.tui.cli.output import echo, error_line, print_json, say, say_event, secho

if TYPE_CHECKING:
    from tfctl.inventory.model import Inventory
    from tfctl.inventory.oneoff import Point
    from tfctl.remote.lab.points import Placement
    from tfctl.remote.oneoff import PointStart

START_WAIT_S = 30.0
"""How long `run` waits for other users' `run`s that are starting on the GPUs it could take
(their tickets go within seconds) before it judges what is free."""


def _fail(text: str, code: int = EXIT_USAGE) -> None:
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
    from tfctl.inventory.oneoff import too_many_gpus
    from tfctl.remote.controller import RunController, UpOptions
    from tfctl.remote.oneoff import (
        candidate_hosts,
        hosts_inventory,
        leave_tickets,
        run_record,
        spread,
        start_points,
        take_tickets,
    )
    from tfctl.tui.cli.setup import CliUpHooks
    from tfctl.tui.cli.sweep import new_sweep_id

    c = obj(ctx)
    hosts = candidate_hosts(inv, gpus_each, host)
    sweep_id = new_sweep_id() if len(found) > 1 or (queues and gpus_each > 0) else None
    job = f"{inv.name}: {name or (found[0].words() if len(found) == 1 else 'sweep')}"
    records = [run_record(p, name=name, sweep=sweep_id, index=i, total=len(found))
               for i, p in enumerate(found)]
    client = socket.gethostname()
    with RunController(hosts_inventory(inv, hosts), c.ssh_options()) as prep:
        prep.setup(UpOptions(sync=sync), say_event, hooks=CliUpHooks(as_json))
        fleet = prep.fleet
        if gpus_each == 0:
            taken = spread(len(found), hosts)
            placement = None
        else:
            ticket = "r-" + (sweep_id or new_sweep_id())[2:]
            for h, why in leave_tickets(fleet, ticket, job, gpus_each, hosts, client).items():
                say(f"warning: {h}: cannot queue there, so no point goes there now: {why}")
            try:
                placement, listed = _placed(fleet, inv, ticket, gpus_each, len(found), hosts)
                too_many = too_many_gpus(inv, gpus_each, listed, host)
                if too_many:
                    _fail(too_many)
                taken = list(placement.taken)
                if not taken and not queues:
                    _fail(f"no {_n_gpus(gpus_each)} free on one host now: "
                          f"{placement.words()}; `tfctl run --when-free` waits for them",
                          EXIT_FAILED)
                placed = [(i, found[i], h, g, records[i]) for i, (h, g) in enumerate(taken)]
                results = start_points(inv, c.ssh_options(), placed, UpOptions(sync=False),
                                       say_event)
                waiting = len(found) - len(taken) + sum(r.retry for r in results)
                if waiting and sweep_id is not None:  # the sweep's own ticket, then ours goes
                    leave_tickets(fleet, sweep_id, job, gpus_each, hosts, client)
            finally:
                take_tickets(fleet, ticket, hosts)
    if gpus_each == 0:
        placed = [(i, found[i], h, g, records[i]) for i, (h, g) in enumerate(taken)]
        results = start_points(inv, c.ssh_options(), placed, UpOptions(sync=False), say_event)
    _said(ctx, inv, found, records, results, sweep_id, gpus_each, hosts, timeout_s, job,
          client, placement, as_json)


def _placed(fleet: Any, inv: Inventory, ticket: str, gpus_each: int, count: int,
            hosts: list[str]) -> tuple[Placement, dict[str, int]]:
    """Where the points go now; while only other users' `run`s that are starting hold them
    back, looked at again until those are gone (START_WAIT_S at most)."""
    from tfctl.remote.oneoff import place

    deadline = time.monotonic() + START_WAIT_S
    told = False
    while True:
        placement, views = place(fleet, inv, ticket, gpus_each, count, hosts)
        listed = {v.host: len(v.listed) for v in views if v.free.error is None}
        if len(placement.taken) == count or not placement.only_starting_ahead \
                or time.monotonic() > deadline:
            return placement, listed
        if not told:
            first = placement.ahead[0]
            say(f"{first.user}'s run {first.id} is starting on GPUs this one could take: "
                "waiting until it has")
            told = True
        time.sleep(0.5)


def _n_gpus(n: int) -> str:
    return f"{n} GPU" + ("" if n == 1 else "s")


def _said(ctx: click.Context, inv: Inventory, found: list[Point], records: list[dict[str, Any]],
          results: list[PointStart], sweep_id: str | None, gpus_each: int, hosts: list[str],
          timeout_s: float, job: str, client: str, placement: Placement | None,
          as_json: bool) -> None:
    """What came of it: the points started, failed and queued (the waiter started for those)."""
    from tfctl.remote.oneoff import where
    from tfctl.tui.cli.queue import start_waiter, write_record
    from tfctl.tui.cli.sweep import MODULE, new_record, took

    entries = [dict(p.to_json(), index=i, state="waiting", run_id=None, host=None, gpus=None,
                    why=None, run=records[i]) for i, p in enumerate(found)]
    record = None
    if sweep_id is not None:
        record = new_record(ctx, sweep_id, inv.path, job, gpus_each, hosts, entries, timeout_s,
                            client)
        lines = took(record, results)
    else:
        lines = took({"points": entries}, results, can_wait=False)
    started = [e for e in entries if e["state"] == "started"]
    failed = [e for e in entries if e["state"] == "failed"]
    waiting = [e for e in entries if e["state"] == "waiting"]
    if record is not None:
        record["state"] = "waiting" if waiting else "started"
        record["why"] = placement.words() if placement is not None and waiting else ""
        write_record(record)
        if waiting:
            record["waiter_pid"] = start_waiter(record, MODULE)
            write_record(record)
    where_started = " ".join(where(e["gpus"], e["host"]) for e in started)
    decision = (f"{len(found)} point{'s' if len(found) != 1 else ''}: {len(started)} started"
                + (f" on {where_started}" if started else "")
                + (f", {len(failed)} failed" if failed else "")
                + (f", {len(waiting)} queued" if waiting else ""))
    if as_json:
        print_json({"sweep": sweep_id, "decision": decision,
                    "run_id": entries[0]["run_id"] if len(entries) == 1 else None, "points": [
            {k: e.get(k) for k in ("index", "values", "argv", "state", "host", "gpus",
                                   "run_id", "ended", "why")} for e in entries],
            "waiter_pid": None if record is None else record.get("waiter_pid"),
            "log": None if record is None else record["log"]})
        for e in failed:
            echo(error_line(e["why"]), err=True)
    else:
        _told(found, entries, results, lines, decision, sweep_id, record, waiting)
    ended_badly = sweep_id is None and bool(results) and results[0].task is not None \
        and results[0].task.failed
    if failed or ended_badly:
        sys.exit(EXIT_FAILED)


def _told(found: list[Point], entries: list[dict[str, Any]], results: list[PointStart],
          lines: list[str], decision: str, sweep_id: str | None, record: dict[str, Any] | None,
          waiting: list[dict[str, Any]]) -> None:
    from tfctl.tui.cli.output import report_failures

    if len(found) == 1 and sweep_id is None:
        e = entries[0]
        task = results[0].task if results else None
        if e["state"] == "started" and task is not None and task.failed:
            from tfctl.tui.cli.failures import task_story

            for line in task_story(task):
                echo(line, err=True)
            secho(f"run {e['run_id']} ended at once: {task.describe()}", err=True, fg="red")
            return
        if e["state"] == "started":
            from tfctl.remote.oneoff import where

            ended = f" and ended ({task.describe()})" if task is not None and task.ended else ""
            click.echo(f"run {e['run_id']} started on {where(e['gpus'], e['host'])}{ended}: "
                       f"{e['words']} · `tfctl logs -f --run {e['run_id']}` to follow · "
                       f"`tfctl down --run {e['run_id']}` to stop")
        else:
            report_failures([r.error for r in results if r.error is not None])
        return
    click.echo(f"sweep {sweep_id}: {decision}" if len(found) > 1 else
               f"{sweep_id}: {decision}")
    for line in lines:
        click.echo(f"  {line}")
    for e in waiting:
        click.echo(f"  {e['words']}: queued")
    if record is not None and waiting:
        click.echo(f"the queued points wait in the background on this machine (pid "
                   f"{record['waiter_pid']}, log {record['log']}): closing the terminal does "
                   f"not stop them · `tfctl queue` lists them · `tfctl down --run {sweep_id}` "
                   "stops the sweep")
    elif sweep_id is not None:
        click.echo(f"`tfctl runs` gives each point's exit status · `tfctl down --run "
                   f"{sweep_id}` stops the sweep")

