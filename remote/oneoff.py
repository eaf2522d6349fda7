"""One-off commands and sweeps on the lab (`tfctl run`): where their points may go, one look
at the hosts that places them, and each point started as a run of its own through
`RunController` and the hosts' `Engine`, like `up`.

`tfctl run` (remote/queue/startrun.py) and a sweep's waiter (remote/queue/waiter.py) both:
look at the hosts their ticket is on (remote/queue/look.py: the GPUs, the claims, every user's
tickets), place as many points as that look allows, first come first served
(remote/queue/points.py, `place`), and start the placed points at once, each a run
(`start_points`: one controller, and one thread, each; the hosts' agents let one-off runs start
beside the workdir's other runs); their claims hold their GPUs from the moment they start. A
start refused because someone took its GPUs in between is a lost race (`RACE_LOST`,
`PointStart.lost_race`): the point may wait again.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tfctl.inventory.model import Inventory
from tfctl.inventory.oneoff import Point, oneoff_plan
from tfctl.remote.connect.fleet import Fleet
from tfctl.remote.connect.transport import SshOptions
from tfctl.remote.engines.engine import UpOptions
from tfctl.remote.errors import GpusBusy, RemoteError, RunLive
from tfctl.remote.queue.look import look
from tfctl.remote.queue.points import Placement, place_points
from tfctl.remote.queue.turn import HostView
from tfctl.remote.runs.status import TaskStatus

Say = Callable[[str], None]

RACE_LOST = (GpusBusy, RunLive)
"""What a point's start raises when its GPUs were taken between the look and the start (a busy
GPU, or another run started on them), nothing started: a lost race, after which it waits
again."""


def candidate_hosts(inv: Inventory, gpus_each: int, host: str | None = None) -> list[str]:
    """The hosts a point may go to: `host`, else every host that has (or, `gpus: free`, may
    have) `gpus_each` GPUs; every host for a CPU-only point."""
    if host is not None:
        return [host]
    return [h.name for h in inv.hosts
            if gpus_each == 0 or h.free_gpus is not None or len(h.gpus) >= gpus_each]


def allowed_gpus(inv: Inventory, hosts: Sequence[str]) -> dict[str, tuple[int, ...] | None]:
    """Host → the GPUs the inventory lets tfctl use there (None: any, on a `gpus: free` host)."""
    return {h: None if inv.host(h).free_gpus is not None else tuple(inv.host(h).gpus)
            for h in hosts}


def hosts_inventory(inv: Inventory, hosts: Sequence[str]) -> Inventory:
    """`inv` with only `hosts` (their `gpus: free` kept: nothing is placed by it)."""
    import dataclasses

    return dataclasses.replace(inv, hosts=tuple(h for h in inv.hosts if h.name in hosts))


def place(fleet: Fleet, inv: Inventory, ticket_id: str, gpus_each: int, count: int,
          hosts: Sequence[str]) -> tuple[Placement, list[HostView]]:
    """Where `count` points go now (looked at once), and the look."""
    views = look(fleet, ticket_id, hosts)
    return place_points(gpus_each, count, ticket_id, views, allowed_gpus(inv, hosts)), views


def spread(count: int, hosts: Sequence[str]) -> list[tuple[str, tuple[int, ...]]]:
    """CPU-only points (`--gpus 0`): all at once, one host after the other."""
    return [(hosts[i % len(hosts)], ()) for i in range(count)]


def run_record(point: Point, *, name: str | None, sweep: str | None, index: int,
               total: int) -> dict[str, Any]:
    """What a point's run records of itself (its manifest's `oneoff`; `tfctl runs` shows it)."""
    import shlex

    return {"command": shlex.join(point.argv), "name": name, "sweep": sweep,
            "point": dict(point.values), "index": index, "points": total}


@dataclass(frozen=True)
class PointStart:
    """How one point's start went: its run id, or the error it was refused with."""

    index: int
    host: str
    gpus: tuple[int, ...]
    run_id: str | None = None
    error: RemoteError | None = None
    task: TaskStatus | None = None
    """Its task as the start left it: running, or already ended (a short command)."""

    @property
    def lost_race(self) -> bool:
        """Refused because someone took its GPUs in between (`RACE_LOST`): it may wait again."""
        return isinstance(self.error, RACE_LOST)


def start_points(inv: Inventory, ssh: SshOptions,
                 placed: Sequence[tuple[int, Point, str, tuple[int, ...], Mapping[str, Any]]],
                 options: UpOptions, say: Say) -> list[PointStart]:
    """Each of `placed` (index, point, host, GPUs, its run record) started at once as a run
    (the hosts' engine, as `up`), one controller and one thread each; how each went, in order.
    A start that fails stops what it started and is told, never raised. Ctrl-C (or SIGTERM)
    waits for the starts under way, stops the runs they started, then goes on up."""
    results: dict[int, PointStart] = {}
    lock = threading.Lock()
    cancel = threading.Event()

    def one(index: int, point: Point, host: str, gpus: tuple[int, ...],
            record: Mapping[str, Any]) -> None:
        from tfctl.remote.controller import RunController

        plan = oneoff_plan(inv, host, gpus, point, record)
        try:
            with RunController(plan.inventory, ssh) as controller:
                run_id = controller.start(plan, options, lambda text: _warned(say, lock, point,
                                                                              text))
                started = controller.up_status
                found = PointStart(index, host, gpus, run_id,
                                   task=started.tasks[0] if started and started.tasks else None)
                if cancel.is_set():
                    controller.rollback(run_id, "interrupted while the sweep's points started")
                    found = PointStart(index, host, gpus, error=RemoteError(
                        host, f"run {run_id} stopped again: interrupted while it started"))
        except RemoteError as exc:
            found = PointStart(index, host, gpus, error=exc)
        except Exception as exc:  # a point's own bug must not hide the other points' runs
            found = PointStart(index, host, gpus, error=RemoteError(host, f"{exc!r}"))
        with lock:
            results[index] = found

    threads = [threading.Thread(target=one, args=p, name=f"tfctl-point-{p[0]}", daemon=True)
               for p in placed]
    for thread in threads:
        thread.start()
    try:
        for thread in threads:
            while thread.is_alive():
                thread.join(0.2)
    except KeyboardInterrupt:
        cancel.set()
        for thread in threads:
            while thread.is_alive():
                with contextlib.suppress(KeyboardInterrupt):
                    thread.join(0.2)
        raise
    return [results[p[0]] for p in placed]


def _warned(say: Say, lock: threading.Lock, point: Point, text: str) -> None:
    """A point's warnings, said with the point; its steps are not news (each start's outcome
    is said once it is known)."""
    from tfctl.remote.runs.steps import WARNING

    if text.startswith(WARNING):
        with lock:
            say(f"{WARNING}{point.words()}: {text[len(WARNING):]}")


def where(gpus: Sequence[int], host: str) -> str:
    """`h1:0` or `h1:0,1`, or `h1` for a CPU-only point."""
    return f"{host}:{','.join(map(str, gpus))}" if gpus else host
