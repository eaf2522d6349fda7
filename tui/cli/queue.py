"""`tfctl up --when-free` and `tfctl queue`: a job that waits for its GPUs, and the line it is in.

Queueing leaves a ticket on each host whose GPUs the plan needs (remote/lab/queue.py: every
user's tickets in one line per host, first come first served) and starts the waiter
(`waiter.py`): a process of its own session (setsid), so closing the terminal does not end it,
that looks at those hosts every few seconds and runs the normal `tfctl up` when the job's turn
has come and its GPUs are free. It runs on this machine: a laptop that sleeps or shuts down
stops it, and its tickets go stale after a minute and a half, holding nobody back.

What this machine queued is kept in `~/.cache/tfctl/queue/` (`$XDG_CACHE_HOME`): one record
per job (`ID.json`: the inventory, the `up` options, what it waits for, its state) and the
waiter's log (`ID.log`). A sweep of one-off commands (`tfctl run`, tui/cli/sweep.py) keeps its
record here too (`s-….json`, with its points), and its points wait under one ticket.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

import click

from tfctl.tui.cli.context import EXIT_FAILED, EXIT_USAGE, obj
from tfctl.tui.cli.output import echo, print_json, secho

if TYPE_CHECKING:
    from tfctl.inventory.subset import Selection
    from tfctl.remote.lab.queue import Look, Want

POLL_S_VAR = "TFCTL_QUEUE_POLL_S"
"""How often a waiter looks at its hosts, in seconds (default 10)."""
DEFAULT_POLL_S = 10.0
WAITING = "waiting"
ENDED = ("started", "failed", "cancelled", "timed_out")


# ---------------------------------------------------------------- this machine's records

def queue_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
    path = Path(base) / "tfctl" / "queue"
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    return path


def record_path(ticket_id: str) -> Path:
    return queue_dir() / f"{ticket_id}.json"


def read_record(ticket_id: str) -> dict[str, Any] | None:
    if not ticket_id.replace("-", "").isalnum():
        return None
    try:
        data = json.loads(record_path(ticket_id).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def write_record(record: dict[str, Any]) -> None:
    """Replace the job's record atomically (the waiter and `queue cancel` both write it)."""
    path = record_path(record["id"])
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(dict(record, updated_at=time.time()), indent=1, sort_keys=True))
    os.replace(tmp, path)


def update_record(ticket_id: str, **changes: Any) -> dict[str, Any]:
    record = read_record(ticket_id) or {"id": ticket_id}
    record.update(changes)
    write_record(record)
    return record


def own_records() -> list[dict[str, Any]]:
    out = []
    for path in sorted([*queue_dir().glob("q-*.json"), *queue_dir().glob("s-*.json")]):
        found = read_record(path.stem)
        if found is not None:
            out.append(found)
    return out


def waiter_alive(record: dict[str, Any]) -> bool:
    """Whether the record's waiter still runs: its pid, running the waiter for this job."""
    pid = record.get("waiter_pid")
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return str(record_path(record["id"])).encode() in argv


def wants_from(record: dict[str, Any]) -> dict[str, Want]:
    from tfctl.remote.lab.queue import Want

    return {h: Want(None if w.get("gpus") is None else tuple(w["gpus"]), w.get("count"))
            for h, w in (record.get("wants") or {}).items()}


def record_fleet(record: dict[str, Any]) -> Any:
    """A Fleet over the record's inventory, with the options it was queued with."""
    from tfctl.inventory.load import load_inventory
    from tfctl.remote.connect.fleet import Fleet
    from tfctl.remote.connect.transport import SshOptions

    inv = load_inventory(record["inventory"], hostfile=record.get("hostfile"))
    return Fleet(inv, SshOptions(float(record.get("connect_timeout_s") or 5.0),
                                 bool(record.get("accept_new_host_keys")),
                                 float(record.get("persist_s") or 60.0)))


# ---------------------------------------------------------------- `up --when-free`

def queue_up(ctx: click.Context, chosen: Selection, up_args: list[str], timeout_s: float,
             as_json: bool) -> None:
    """Queue the job of `chosen` and start its waiter (`up --when-free`)."""
    from tfctl.inventory.plan import make_plan
    from tfctl.remote.connect.fleet import Fleet
    from tfctl.remote.lab.queue import look, new_ticket_id, put, wants_of

    c = obj(ctx)
    inv = chosen.inventory
    wants = wants_of(make_plan(inv))
    if not wants:
        secho("error: the plan puts no task on a GPU: nothing to wait for (run `tfctl up`)",
              err=True, fg="red")
        sys.exit(EXIT_USAGE)
    ticket_id = new_ticket_id()
    client = socket.gethostname()
    with Fleet(inv, c.ssh_options()) as fleet:
        left = put(fleet, ticket_id, inv.name, wants, client)
        if left["failed"]:
            from tfctl.remote.lab.queue import drop

            drop(fleet, ticket_id, list(left["succeeded"]))
            for host, exc in left["failed"].items():
                secho(f"error: {host}: cannot queue there: {exc}", err=True, fg="red")
            secho("nothing was queued", err=True, fg="red")
            sys.exit(EXIT_FAILED)
        first = look(fleet, ticket_id, wants)
    poll_s = float(os.environ.get(POLL_S_VAR) or DEFAULT_POLL_S)
    record = {"id": ticket_id, "inventory": os.path.abspath(inv.path or c.inventory_file()),
              "hostfile": None if c.hostfile is None else os.path.abspath(c.hostfile),
              "cwd": os.getcwd(), "up_args": up_args, "job": inv.name, "client": client,
              "connect_timeout_s": c.connect_timeout_s,
              "accept_new_host_keys": c.accept_new_host_keys, "persist_s": c.persist_s,
              "wants": {h: w.to_json() for h, w in wants.items()}, "queued_at": time.time(),
              "timeout_s": timeout_s, "poll_s": poll_s, "state": WAITING,
              "why": first.why() or "its turn: starting", "run_id": None,
              "log": str(queue_dir() / f"{ticket_id}.log")}
    write_record(record)
    record["waiter_pid"] = start_waiter(record)
    write_record(record)
    if as_json:
        print_json(_queued_json(record, first))
        return
    where = "; ".join(f"{h}: {w.words()}" + _position(first, h) for h, w in wants.items())
    click.echo(f"queued {ticket_id} for {where}")
    if first.why():
        click.echo(f"waits for {first.why()}")
    click.echo(f"it waits in the background on this machine (pid {record['waiter_pid']}, log "
               f"{record['log']}): closing the terminal does not stop it, a sleeping laptop "
               f"does · `tfctl queue` lists it · `tfctl queue cancel {ticket_id}`")


def _position(found: Look, host: str) -> str:
    turn = found.turns.get(host)
    if turn is None or turn.position is None:
        return ""
    return f" (#{turn.position} in line)"


def _queued_json(record: dict[str, Any], first: Look) -> dict[str, Any]:
    return {"id": record["id"], "job": record["job"], "wants": record["wants"],
            "positions": {h: t.position for h, t in first.turns.items()},
            "waiting_for": {h: t.why for h, t in first.turns.items() if not t.ready},
            "waiter_pid": record["waiter_pid"], "log": record["log"],
            "timeout_s": record["timeout_s"]}


def start_waiter(record: dict[str, Any], module: str = "tfctl.tui.cli.waiter") -> int:
    """The waiter (`module`'s: a sweep's is tui/cli/sweep.py), in a session of its own (no
    terminal: closing ours does not reach it), its output into the job's log; its pid."""
    import subprocess

    log = open(record["log"], "ab")  # noqa: SIM115 - handed to the child, closed here after
    try:
        child = subprocess.Popen([sys.executable, "-m", module,
                                  str(record_path(record["id"]))],
                                 stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                 cwd=record["cwd"], start_new_session=True, close_fds=True)
    finally:
        log.close()
    return child.pid


def waiter_log(text: str) -> None:
    """A line of a waiter's log (its output, the record's `ID.log`), after the local time."""
    print(time.strftime("%Y-%m-%d %H:%M:%S ") + text, flush=True)


class Waiting(NamedTuple):
    """What a waiter (waiter.py for `up --when-free`, sweep.py for a sweep) starts from."""

    record_id: str
    record: dict[str, Any]
    stop: threading.Event
    """Set by SIGTERM (`tfctl queue cancel`) and SIGINT."""
    deadline: float
    """When the wait ends, in seconds since the epoch: queued at, plus its timeout."""
    poll_s: float


def start_waiting(path: str, what: str) -> Waiting | None:
    """The waiter's record (at `path`, a `what` record) with its signals set: SIGTERM and SIGINT
    set `stop`, SIGHUP is ignored (no terminal is a waiter's own). None where there is no record,
    said in the log."""
    record_id = path.rsplit("/", 1)[-1].removesuffix(".json")
    record = read_record(record_id)
    if record is None:
        waiter_log(f"no {what} record at {path}")
        return None
    stop = threading.Event()
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    return Waiting(record_id, record, stop,
                   float(record["queued_at"]) + float(record["timeout_s"]),
                   float(record.get("poll_s") or DEFAULT_POLL_S))


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
    from tfctl.remote.lab.queue import look

    inv = obj(ctx).load()
    mine = {r["id"]: r for r in own_records()}
    hosts = [h.name for h in inv.hosts]
    with Fleet(inv, obj(ctx).ssh_options()) as fleet:
        found = look(fleet, None, {}, hosts=hosts)
    rows: dict[str, list[dict[str, Any]]] = {}
    for host in hosts:
        me = found.me_uids.get(host)
        rows[host] = [dict(t.to_json(), position=i + 1, mine=t.uid == me,
                           queued_here=t.id in mine and t.uid == me)
                      for i, t in enumerate(found.tickets.get(host, ()))]
    unreachable = dict(found.unreachable)
    local = [_local_json(r) for r in mine.values()]
    if as_json:
        print_json({"hosts": rows, "mine": local, "unreachable": unreachable,
                    "warnings": list(found.warnings)})
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
    for w in found.warnings:
        secho(f"warning: {w}", err=True, fg="yellow")


def _local_json(record: dict[str, Any]) -> dict[str, Any]:
    keys = ("id", "job", "state", "why", "run_id", "log", "wants", "queued_at", "timeout_s",
            "inventory", "waiter_pid", "updated_at", "points")
    return dict({k: record.get(k) for k in keys}, waiter_alive=waiter_alive(record))


def _clock(wall_s: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(wall_s))


def _cancel(ticket_id: str, as_json: bool) -> None:
    from tfctl.remote.lab.queue import drop

    record = read_record(ticket_id)
    if record is None:
        secho(f"error: no job {ticket_id} was queued from here (`tfctl queue` lists the "
              "jobs; only the machine that queued one cancels it)", err=True, fg="red")
        sys.exit(EXIT_USAGE)
    was = record.get("state")
    stopped = False
    if waiter_alive(record):
        with contextlib.suppress(ProcessLookupError):
            os.kill(int(record["waiter_pid"]), signal.SIGTERM)
            stopped = True
        deadline = time.monotonic() + 30
        while waiter_alive(record) and time.monotonic() < deadline:
            time.sleep(0.2)
    hosts = list(record.get("wants") or {})
    with record_fleet(record) as fleet:  # the waiter drops them too; a dead one cannot
        dropped = drop(fleet, ticket_id, hosts)
    if was == WAITING:
        record = update_record(ticket_id, state="cancelled", why="cancelled")
    failed = {h: str(e) for h, e in dropped["failed"].items()}
    data = {"id": ticket_id, "was": was, "state": record.get("state"),
            "waiter_stopped": stopped, "tickets_removed": sorted(
                h for h, a in dropped["succeeded"].items() if a.dropped),
            "failed": failed}
    if as_json:
        print_json(data)
    elif was != WAITING:
        echo(f"{ticket_id} was not waiting ({was}); its tickets are gone")
    else:
        echo(f"cancelled {ticket_id}" + (" (its waiter stopped)" if stopped else ""))
    for host, why in failed.items():
        secho(f"error: {host}: its ticket could not be removed: {why}", err=True, fg="red")
    if failed:
        sys.exit(EXIT_FAILED)
