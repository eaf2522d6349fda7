"""`tfctl up --when-free` and `tfctl queue`: a job that waits for its GPUs, and the line it is in.

The queue is the library's (remote/queue/: the tickets every user's jobs hold on the hosts,
whose turn it is, this machine's records of what it queued, and the waiter that starts a job
when its turn has come and its GPUs are free, in a process of its own); this module reads the
options, calls it, and says what it did.
"""

from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING, Any

import click

from tfctl.tui.cli.context import EXIT_FAILED, EXIT_USAGE, obj
from tfctl.tui.cli.output import echo, print_json, secho

if TYPE_CHECKING:
    from tfctl.inventory.subset import Selection
    from tfctl.remote.queue.enqueue import Origin
    from tfctl.remote.queue.record import WaitingJob
    from tfctl.remote.queue.turn import Turns
    from tfctl.remote.queue.upstart import UpRequest


def origin(ctx: click.Context, inventory_path: str | None = None) -> Origin:
    """Where a job is queued from: this command's inventory and connection options."""
    from tfctl.remote.queue.enqueue import Origin

    c = obj(ctx)
    return Origin(inventory_path or c.inventory_file(), c.hostfile, c.ssh_options())


# ---------------------------------------------------------------- `up --when-free`

def queue_up(ctx: click.Context, chosen: Selection, request: UpRequest, timeout_s: float,
             as_json: bool) -> None:
    """Queue the job of `chosen` and start its waiter (`up --when-free`)."""
    from tfctl.remote.queue.enqueue import NothingToWaitFor
    from tfctl.remote.queue.enqueue import queue_up as enqueue

    inv = chosen.inventory
    try:
        queued = enqueue(inv, origin(ctx, inv.path), request, timeout_s)
    except NothingToWaitFor as exc:
        secho(f"error: {exc}", err=True, fg="red")
        sys.exit(EXIT_USAGE)
    job, first = queued.job, queued.first
    if job is None:
        for host, why in queued.failed.items():
            secho(f"error: {host}: cannot queue there: {why}", err=True, fg="red")
        secho("nothing was queued", err=True, fg="red")
        sys.exit(EXIT_FAILED)
    if as_json:
        print_json(_queued_json(job, first))
        return
    where = "; ".join(f"{h}: {w.words()}" + _position(first, h) for h, w in job.wants.items())
    click.echo(f"queued {job.id} for {where}")
    if first.why():
        click.echo(f"waits for {first.why()}")
    click.echo(f"it waits in the background on this machine (pid {job.waiter_pid}, log "
               f"{job.log}): closing the terminal does not stop it, a sleeping laptop "
               f"does · `tfctl queue` lists it · `tfctl queue cancel {job.id}`")


def _position(found: Turns, host: str) -> str:
    turn = found.turns.get(host)
    if turn is None or turn.position is None:
        return ""
    return f" (#{turn.position} in line)"


def _queued_json(job: WaitingJob, first: Turns) -> dict[str, Any]:
    return {"id": job.id, "job": job.job, "wants": {h: w.to_json() for h, w in job.wants.items()},
            "positions": {h: t.position for h, t in first.turns.items()},
            "waiting_for": {h: t.why for h, t in first.turns.items() if not t.ready},
            "waiter_pid": job.waiter_pid, "log": job.log, "timeout_s": job.timeout_s}


# ---------------------------------------------------------------- `tfctl queue`

@click.command()
@click.argument("action", required=False, type=click.Choice(["cancel"]), metavar="[cancel ID]")
@click.argument("ticket_id", required=False, metavar="")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object on stdout; see "
              "the README.")
@click.pass_context
def queue(ctx: click.Context, action: str | None, ticket_id: str | None, as_json: bool) -> None:
    """The jobs waiting for GPUs on the inventory's hosts (every user's), in line order; or
    `cancel ID`: stop waiting (only your own jobs).

    Jobs are queued with `tfctl up --when-free`; each waits on the machine that queued it.

    \b
    Example:
      tfctl queue
      tfctl queue --json | jq '.hosts[][] | select(.mine) | .id'
      tfctl queue cancel q-20261125-181500-ab12
    """
    if action == "cancel":
        if not ticket_id:
            raise click.UsageError("give the ID to cancel: `tfctl queue cancel ID` "
                                   "(`tfctl queue` lists them)")
        _cancel(ticket_id, as_json)
        return
    if ticket_id:
        raise click.UsageError(f"unexpected {ticket_id!r}: `tfctl queue` or "
                               "`tfctl queue cancel ID`")
    _list(ctx, as_json)


def _list(ctx: click.Context, as_json: bool) -> None:
    from tfctl.remote.connect.fleet import Fleet
    from tfctl.remote.queue.look import look
    from tfctl.remote.queue.record import WAITING, own_jobs

    inv = obj(ctx).load()
    mine = {j.id: j for j in own_jobs()}
    hosts = [h.name for h in inv.hosts]
    with Fleet(inv, obj(ctx).ssh_options()) as fleet:
        views = look(fleet, None, hosts)
    rows: dict[str, list[dict[str, Any]]] = {}
    unreachable = {v.host: v.unreachable for v in views if v.unreachable is not None}
    for view in views:
        if view.unreachable is not None:
            rows[view.host] = []
            continue
        rows[view.host] = [dict(t.to_json(), position=i + 1, mine=t.uid == view.me_uid,
                                queued_here=t.id in mine and t.uid == view.me_uid)
                           for i, t in enumerate(view.tickets)]
    warnings = [f"{v.host}: {w}" for v in views for w in v.warnings]
    local = [_local_json(j) for j in mine.values()]
    if as_json:
        print_json({"hosts": rows, "mine": local, "unreachable": unreachable,
                    "warnings": warnings})
        return
    for host in hosts:
        if host in unreachable:
            secho(f"{host}: cannot look: {unreachable[host]}", fg="red")
            continue
        if not rows[host]:
            click.echo(f"{host}: nobody waits")
            continue
        click.echo(f"{host}:")
        for row in rows[host]:
            stale = " (stale: its waiter is gone or asleep)" if row["state"] == "stale" else ""
            click.echo(f"  {row['position']}. {row['id']}  {row['user']}  job {row['job']}  "
                       f"for {row['wants_words']}  since {_clock(row['queued'])}  "
                       f"from {row['client'] or '?'}{stale}")
    for r in local:
        if r["state"] == WAITING:
            alive = "" if r["waiter_alive"] else " (its waiter is not running: cancel it)"
            click.echo(f"yours {r['id']}: waiting{alive}; for {r['why']} · log {r['log']}")
            for point in r.get("points") or ():
                if point.get("state") == WAITING:
                    click.echo(f"    point {point['index'] + 1}: {point['words']}  waiting")
        else:
            run = f" run {r['run_id']}" if r.get("run_id") else ""
            click.echo(f"yours {r['id']}: {r['state']}{run} · log {r['log']}")
    for w in warnings:
        secho(f"warning: {w}", err=True, fg="yellow")


def _local_json(job: WaitingJob) -> dict[str, Any]:
    from tfctl.remote.queue.record import waiter_alive

    record = job.to_json()
    keys = ("id", "job", "state", "why", "run_id", "log", "wants", "queued_at", "timeout_s",
            "inventory", "waiter_pid", "updated_at", "points")
    return dict({k: record.get(k) for k in keys}, waiter_alive=waiter_alive(job))


def _clock(wall_s: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(wall_s))


def _cancel(ticket_id: str, as_json: bool) -> None:
    from tfctl.remote.queue.enqueue import cancel
    from tfctl.remote.queue.record import WAITING, read

    job = read(ticket_id)
    if job is None:
        secho(f"error: no job {ticket_id} was queued from here (`tfctl queue` lists the "
              "jobs; only the machine that queued one cancels it)", err=True, fg="red")
        sys.exit(EXIT_USAGE)
    done = cancel(job)
    data = {"id": ticket_id, "was": done.was, "state": done.job.state,
            "waiter_stopped": done.waiter_stopped, "tickets_removed": list(done.tickets_removed),
            "failed": done.failed}
    if as_json:
        print_json(data)
    elif done.was != WAITING:
        echo(f"{ticket_id} was not waiting ({done.was}); its tickets are gone")
    else:
        echo(f"cancelled {ticket_id}" + (" (its waiter stopped)" if done.waiter_stopped else ""))
    for host, why in done.failed.items():
        secho(f"error: {host}: its ticket could not be removed: {why}", err=True, fg="red")
    if done.failed:
        sys.exit(EXIT_FAILED)
