"""`tfctl run`'s decisions: which hosts its points may go to, what starts now and what queues,
and the sweep that the queued points wait in.

1. the code is synced and `job.setup` run (cached) once, on every host a point may go to, so
   every point of a sweep runs the code as it was when `run` was typed;
2. a ticket for a count of N free GPUs (`r-…`, ids.py) is left on each of those hosts, and the
   points are placed from one look (remote/oneoff.py's `place`); while only other users' `run`s
   that are starting hold them back, looked at again until those are gone (`START_WAIT_S`);
3. the placed points start at once, each a run (remote/oneoff.py's `start_points`);
4. a sweep (`--each`), or `--when-free`, whose points did not all start leaves the sweep's own
   ticket (`s-…`) before the starting one goes, so that they keep their place in line; their
   record and waiter are enqueue.py's `queue_sweep`.

A point whose start lost a race for its GPUs waits with the rest of a sweep; a plain `run`'s
fails. CPU-only points (`--gpus 0`) take no ticket: they start at once, spread over the hosts.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tfctl.inventory.model import Inventory
from tfctl.inventory.oneoff import Point
from tfctl.remote.connect.fleet import Fleet
from tfctl.remote.errors import FleetError
from tfctl.remote.queue.enqueue import Origin, queue_sweep
from tfctl.remote.queue.ids import new_sweep_id, starting_id
from tfctl.remote.queue.points import Placement
from tfctl.remote.queue.record import WaitingJob, WaitingPoint
from tfctl.remote.runs.steps import UpHooks

if TYPE_CHECKING:
    from tfctl.remote.oneoff import PointStart

START_WAIT_S = 30.0
"""How long `run` waits for other users' `run`s that are starting on the GPUs it could take
(their tickets go within seconds) before it judges what is free."""

Say = Callable[[str], None]


class RunRefused(FleetError):
    """`run` started nothing: the lab has fewer GPUs on any host than a point takes
    (`usage`), or none free now and the points may not wait."""

    def __init__(self, what: str, usage: bool) -> None:
        super().__init__(what, kind="run_refused")
        self.usage = usage


@dataclass
class RunStarted:
    """What `run` did: every point as its start left it, the lines said of the starts, the
    sweep (with its record when points wait in it), and the placement of the first look."""

    points: list[WaitingPoint]
    results: list[PointStart]
    lines: list[str]
    sweep_id: str | None
    record: WaitingJob | None
    placement: Placement | None

    def by_state(self, state: str) -> list[WaitingPoint]:
        return [p for p in self.points if p.state == state]


def start_run(inv: Inventory, origin: Origin, found: Sequence[Point], gpus_each: int,
              host: str | None, queues: bool, timeout_s: float, name: str | None, sync: bool,
              on_event: Say, say: Say | None = None, hooks: UpHooks | None = None
              ) -> RunStarted:
    """Start the points of `found` that fit now and queue the rest (module doc). `queues`:
    points that find no GPU may wait (`--when-free`, or a sweep); `on_event` hears the steps
    of the setup and the starts, `say` (default: `on_event`) what `run` itself tells. Raises
    `RunRefused`, or the sync's and setup's errors, with nothing started."""
    from tfctl.inventory.oneoff import too_many_gpus
    from tfctl.remote.controller import RunController
    from tfctl.remote.engines.engine import UpOptions
    from tfctl.remote.oneoff import (
        candidate_hosts,
        hosts_inventory,
        run_record,
        spread,
        start_points,
    )
    from tfctl.remote.queue.sweep import took
    from tfctl.remote.queue.tickets import drop, put_count

    hosts = candidate_hosts(inv, gpus_each, host)
    sweep_id = new_sweep_id() if len(found) > 1 or (queues and gpus_each > 0) else None
    job = f"{inv.name}: {name or (found[0].words() if len(found) == 1 else 'sweep')}"
    records = [run_record(p, name=name, sweep=sweep_id, index=i, total=len(found))
               for i, p in enumerate(found)]
    points = [WaitingPoint.of(i, p, records[i]) for i, p in enumerate(found)]
    client = origin.client()
    say = say or on_event
    placement = None
    with RunController(hosts_inventory(inv, hosts), origin.ssh) as prep:
        prep.setup(UpOptions(sync=sync), on_event, hooks=hooks)
        fleet = prep.fleet
        if gpus_each == 0:
            taken = spread(len(found), hosts)
        else:
            ticket = starting_id(sweep_id)
            for h, why in put_count(fleet, ticket, job, gpus_each, hosts, client).items():
                say(f"warning: {h}: cannot queue there, so no point goes there now: {why}")
            try:
                placement, listed = _placed(fleet, inv, ticket, gpus_each, len(found), hosts,
                                            say)
                too_many = too_many_gpus(inv, gpus_each, listed, host)
                if too_many:
                    raise RunRefused(too_many, usage=True)
                taken = list(placement.taken)
                if not taken and not queues:
                    raise RunRefused(f"no {_n_gpus(gpus_each)} free on one host now: "
                                     f"{placement.words()}; `tfctl run --when-free` waits for "
                                     "them", usage=False)
                placed = [(i, found[i], h, g, records[i]) for i, (h, g) in enumerate(taken)]
                results = start_points(inv, origin.ssh, placed, UpOptions(sync=False),
                                       on_event)
                waiting = len(found) - len(taken) + sum(r.lost_race for r in results)
                if waiting and sweep_id is not None:  # the sweep's own ticket, then ours goes
                    put_count(fleet, sweep_id, job, gpus_each, hosts, client)
            finally:
                drop(fleet, ticket, hosts)
    if gpus_each == 0:
        placed = [(i, found[i], h, g, records[i]) for i, (h, g) in enumerate(taken)]
        results = start_points(inv, origin.ssh, placed, UpOptions(sync=False), on_event)
    lines = took(points, results, can_wait=sweep_id is not None)
    record = None
    if sweep_id is not None:
        why = placement.words() if placement is not None else ""
        record = queue_sweep(origin, sweep_id, job, gpus_each, hosts, points, timeout_s, why)
    return RunStarted(points, results, lines, sweep_id, record, placement)


def _placed(fleet: Fleet, inv: Inventory, ticket: str, gpus_each: int, count: int,
            hosts: list[str], say: Say) -> tuple[Placement, dict[str, int]]:
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
