"""A sweep's points that wait for GPUs (`tfctl run --each`, `run --when-free`): their record,
their waiter, and stopping the sweep.

The record is this machine's, beside `up --when-free`'s (tui/cli/queue.py: `s-….json` in
`~/.cache/tfctl/queue/`): the inventory and connection options, how many GPUs each point takes
and where it may go, and every point with its state (`waiting`, `started` with its run id and
GPUs, `failed` with why, `cancelled`). The waiting points hold one ticket per host, the
sweep's id, queued when `run` was typed, so they keep their place in every user's line as one
job (remote/lab/points.py).

The waiter (`python -m tfctl.tui.cli.sweep RECORD`, started by `run` in a session of its own,
as `up --when-free`'s is: closing the terminal does not stop it) looks at the hosts every
`TFCTL_QUEUE_POLL_S` seconds (10), places what it can, and starts those points at once in its
own process (remote/oneoff.py), each a run; a point whose start lost its GPUs to someone in
between waits again. It ends once no point waits, after `--timeout`, or on SIGTERM (`tfctl queue
cancel ID`, `tfctl down --run ID`), its ticket removed.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
from typing import TYPE_CHECKING, Any

import click

from tfctl.tui.cli.context import EXIT_FAILED, EXIT_USAGE, obj
from tfctl.tui.cli.output import echo, print_json, secho
from tfctl.tui.cli.queue import (
    WAITING,
    queue_dir,
    read_record,
    record_fleet,
    start_waiting,
    waiter_alive,
    write_record,
)
from tfctl.tui.cli.queue import waiter_log as log

if TYPE_CHECKING:
    from tfctl.inventory.oneoff import Point

MODULE = "tfctl.tui.cli.sweep"


def new_sweep_id() -> str:
    """`s-20261125-181500-ab12`: sortable by when it was made, unique enough per user."""
    import secrets

    return time.strftime("s-%Y%m%d-%H%M%S-", time.gmtime()) + secrets.token_hex(2)


def point_of(entry: dict[str, Any]) -> Point:
    from tfctl.inventory.oneoff import Point

    return Point(tuple(entry["argv"]), tuple((str(k), str(v))
                                             for k, v in (entry.get("values") or {}).items()))


def waiting_points(record: dict[str, Any]) -> list[dict[str, Any]]:
    return [p for p in record.get("points") or () if p.get("state") == WAITING]


def took(record: dict[str, Any], results: list[Any], can_wait: bool = True) -> list[str]:
    """The points' entries updated with how their starts went; a line for each. A point whose
    start lost its GPUs to someone in between waits again (`can_wait`), else it failed."""
    from tfctl.remote.oneoff import where

    by_index = {p["index"]: p for p in record["points"]}
    lines = []
    for found in results:
        entry = by_index[found.index]
        at = where(found.gpus, found.host)
        if found.run_id is not None:
            ended = found.task.describe() if found.task is not None and found.task.ended \
                else None
            entry.update(state="started", run_id=found.run_id, host=found.host,
                         gpus=list(found.gpus), why=None, started_at=time.time(), ended=ended)
            lines.append(f"{entry['words']}: run {found.run_id} on {at}"
                         + (f" (ended at once: {ended})" if ended else ""))
        elif found.retry and can_wait:
            entry.update(state=WAITING, why=f"lost {at} to another job just now")
            lines.append(f"{entry['words']}: lost {at} to another job just now: waits again")
        else:
            entry.update(state="failed", host=found.host, gpus=list(found.gpus),
                         why=str(found.error))
            lines.append(f"{entry['words']}: failed on {at}: {found.error}")
    return lines


# ---------------------------------------------------------------- the waiter

def wait_sweep(path: str) -> int:
    from tfctl.remote.engines.engine import UpOptions
    from tfctl.remote.oneoff import leave_tickets, place, start_points, take_tickets

    start = start_waiting(path, "sweep")
    if start is None:
        return 2
    sweep_id, record, stop, deadline, poll_s = start
    hosts, each = list(record["wants"]), int(record["gpus_each"])
    log(f"{len(waiting_points(record))} points wait for {each} free GPU"
        f"{'s' if each != 1 else ''} each on {', '.join(hosts)}")
    state, said = "started", None
    while waiting_points(record):
        if stop.is_set():
            state = "cancelled"
            break
        if time.time() > deadline:
            state = "timed_out"
            break
        waiting = waiting_points(record)
        try:
            with record_fleet(record) as fleet:
                placement, _views = place(fleet, fleet.inventory, sweep_id, each, len(waiting),
                                          hosts)
                lost = [h for h, w in placement.why.items() if w == "our ticket is not there"]
                if lost:  # the host lost it (its /tmp was emptied): queued there again
                    log(f"ticket gone from {', '.join(lost)}: queued there again")
                    leave_tickets(fleet, sweep_id, record["job"], each, lost, record["client"])
                inv, ssh = fleet.inventory, fleet.options
            why = placement.words() or "its turn"
        except Exception as exc:  # an inventory edited meanwhile, a host down: look again
            placement, why = None, f"cannot look: {exc}"
        if placement is not None and placement.taken:
            placed = [(p["index"], point_of(p), host, gpus, p["run"])
                      for p, (host, gpus) in zip(waiting, placement.taken, strict=False)]
            for line in took(record, start_points(inv, ssh, placed, UpOptions(sync=False),
                                                  log)):
                log(line)
            record["why"] = why
            write_record(record)
            said = None
            continue  # look again at once: more may fit, or the next in line may start
        if why != said:
            log(why)
            said = why
            record["why"] = why
            write_record(record)
        stop.wait(poll_s)
    for p in waiting_points(record):
        p.update(state="cancelled" if state == "cancelled" else "timed_out", why=state)
    log(f"{state}: {_counts(record)}")
    try:
        with record_fleet(record) as fleet:
            take_tickets(fleet, sweep_id, hosts)
    except Exception as exc:  # stale within minutes anyway, holding nobody back
        log(f"could not remove its tickets: {exc}")
    record.update(state=state, why=_counts(record), ended_at=time.time())
    write_record(record)
    return 0 if state == "started" else 1


def _counts(record: dict[str, Any]) -> str:
    """`4 started, 1 failed, 1 waiting`."""
    found: dict[str, int] = {}
    for p in record.get("points") or ():
        found[p["state"]] = found.get(p["state"], 0) + 1
    return ", ".join(f"{n} {s}" for s, n in found.items())


# ---------------------------------------------------------------- its record

def new_record(ctx: click.Context, sweep_id: str, inventory_path: str, job: str,
               gpus_each: int, hosts: list[str], points: list[dict[str, Any]],
               timeout_s: float, client: str) -> dict[str, Any]:
    from tfctl.tui.cli.queue import DEFAULT_POLL_S, POLL_S_VAR

    c = obj(ctx)
    return {"id": sweep_id, "kind": "sweep", "inventory": os.path.abspath(inventory_path),
            "hostfile": None if c.hostfile is None else os.path.abspath(c.hostfile),
            "cwd": os.getcwd(), "job": job, "client": client,
            "connect_timeout_s": c.connect_timeout_s,
            "accept_new_host_keys": c.accept_new_host_keys, "persist_s": c.persist_s,
            "wants": {h: {"gpus": None, "count": gpus_each} for h in hosts},
            "gpus_each": gpus_each, "queued_at": time.time(), "timeout_s": timeout_s,
            "poll_s": float(os.environ.get(POLL_S_VAR) or DEFAULT_POLL_S),
            "state": WAITING, "why": "", "run_id": None, "points": points,
            "log": str(queue_dir() / f"{sweep_id}.log")}


# ---------------------------------------------------------------- `down --run SWEEP`

def stop_sweep(ctx: click.Context, sweep_id: str, grace_s: float, as_json: bool) -> None:
    """Stop the sweep's running points (each as `down --run`) and cancel its waiting ones."""
    from tfctl.remote.controller import RunController
    from tfctl.remote.errors import RemoteError
    from tfctl.remote.oneoff import take_tickets

    record = read_record(sweep_id)
    if record is None or record.get("kind") != "sweep":
        secho(f"error: no sweep {sweep_id} was started from here (`tfctl queue` lists this "
              "machine's; `tfctl runs` each point's run)", err=True, fg="red")
        sys.exit(EXIT_USAGE)
    waited = {p["index"] for p in record["points"] if p["state"] == WAITING}
    if waiter_alive(record):  # it marks its waiting points cancelled as it ends
        with contextlib.suppress(ProcessLookupError):
            os.kill(int(record["waiter_pid"]), signal.SIGTERM)
        deadline = time.monotonic() + 60  # a start under way ends first, then it writes
        while waiter_alive(record) and time.monotonic() < deadline:
            time.sleep(0.2)
        record = read_record(sweep_id) or record
    cancelled = [p for p in record["points"] if p["index"] in waited
                 and p["state"] in (WAITING, "cancelled")]
    for p in cancelled:
        p.update(state="cancelled", why="cancelled by tfctl down")
    stopped: dict[str, Any] = {}
    errors: dict[str, str] = {}
    with record_fleet(record) as fleet:
        if cancelled or record.get("state") == WAITING:
            take_tickets(fleet, sweep_id, list(record["wants"]))
        inv, ssh = fleet.inventory, obj(ctx).ssh_options()
    for p in record["points"]:
        if p["state"] != "started" or not p.get("run_id"):
            continue
        try:
            with RunController(inv, ssh) as controller:
                controller.select_run(p["run_id"], hosts=(p["host"],))
                summary = controller.down(grace_s)
            stopped[p["run_id"]] = list(summary.stopped)
            if summary.errors:
                errors[p["run_id"]] = "; ".join(str(e) for e in summary.errors.values())
        except RemoteError as exc:
            errors[p["run_id"]] = str(exc)
    if record.get("state") == WAITING:
        record["state"] = "cancelled"
    record["why"] = f"stopped by tfctl down: {_counts(record)}"
    write_record(record)
    if as_json:
        print_json({"sweep": sweep_id, "stopped": stopped, "cancelled": [p["index"]
                                                                         for p in cancelled],
                    "errors": errors, "clean": not errors})
    else:
        for run_id, tasks in stopped.items():
            echo(f"run {run_id}: " + (f"stopped {', '.join(tasks)}" if tasks else
                                     "nothing to stop (already ended)"))
        echo(f"sweep {sweep_id}: {len(stopped)} point runs stopped or ended, "
             f"{len(cancelled)} waiting points cancelled")
        for run_id, why in errors.items():
            secho(f"  ✖ run {run_id}: {why}", err=True, fg="red")
    if errors:
        sys.exit(EXIT_FAILED)


if __name__ == "__main__":
    sys.exit(wait_sweep(sys.argv[1]))
