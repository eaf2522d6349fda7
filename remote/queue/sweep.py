"""A sweep's points that wait for GPUs (`tfctl run --each`, `run --when-free`): what their
starts did to their record, and stopping the sweep (`down --run SWEEP`).

The sweep's record (record.py, `s-….json`) holds the inventory and connection options, how many
GPUs each point takes and where it may go, and every point with its state. The waiting points
hold one ticket per host, the sweep's id, queued when `run` was typed, so they keep their place
in every user's line as one job (points.py); the waiter (waiter.py) places and starts them as
GPUs free.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from tfctl.remote.connect.transport import SshOptions
from tfctl.remote.errors import RemoteError
from tfctl.remote.oneoff import PointStart, where
from tfctl.remote.queue import record as store
from tfctl.remote.queue.record import CANCELLED, FAILED, STARTED, WAITING, WaitingJob
from tfctl.remote.queue.tickets import drop


def took(points: Sequence[store.WaitingPoint], results: Sequence[PointStart],
         can_wait: bool = True) -> list[str]:
    """The points updated with how their starts went; a line for each. A point whose start lost
    a race for its GPUs waits again (`can_wait`), else it failed."""
    by_index = {p.index: p for p in points}
    lines = []
    for found in results:
        entry = by_index[found.index]
        at = where(found.gpus, found.host)
        if found.run_id is not None:
            ended = found.task.describe() if found.task is not None and found.task.ended \
                else None
            entry.state, entry.run_id, entry.host = STARTED, found.run_id, found.host
            entry.gpus, entry.why, entry.started_at = list(found.gpus), None, time.time()
            entry.ended = ended
            lines.append(f"{entry.words}: run {found.run_id} on {at}"
                         + (f" (ended at once: {ended})" if ended else ""))
        elif found.lost_race and can_wait:
            entry.state, entry.why = WAITING, f"lost {at} to another job just now"
            lines.append(f"{entry.words}: lost {at} to another job just now: waits again")
        else:
            entry.state, entry.host, entry.gpus = FAILED, found.host, list(found.gpus)
            entry.why = str(found.error)
            lines.append(f"{entry.words}: failed on {at}: {found.error}")
    return lines


@dataclass
class SweepStopped:
    """What `down --run SWEEP` did: each running point's run stopped, the waiting ones
    cancelled, and the errors of those it could not stop."""

    sweep_id: str
    stopped: dict[str, list[str]] = field(default_factory=dict)
    """Run id → the tasks stopped (none: it had ended)."""
    cancelled: list[int] = field(default_factory=list)
    """The indices of the points that were waiting."""
    errors: dict[str, str] = field(default_factory=dict)


def stop_sweep(job: WaitingJob, grace_s: float, ssh: SshOptions | None = None) -> SweepStopped:
    """Stop the sweep's running points (each as `down --run`), cancel its waiting ones (its
    waiter stopped first: it marks them cancelled as it ends), remove its tickets. `ssh`: the
    options the points' runs are stopped with (default: the record's)."""
    from tfctl.remote.controller import RunController

    sweep_id = job.id
    waited = {p.index for p in job.points if p.state == WAITING}
    if store.waiter_alive(job):
        with contextlib.suppress(ProcessLookupError):
            os.kill(int(job.waiter_pid or 0), signal.SIGTERM)
        deadline = time.monotonic() + 60  # a start under way ends first, then it writes
        while store.waiter_alive(job) and time.monotonic() < deadline:
            time.sleep(0.2)
        job = store.read(sweep_id) or job
    cancelled = [p for p in job.points if p.index in waited and p.state in (WAITING, CANCELLED)]
    for p in cancelled:
        p.state, p.why = CANCELLED, "cancelled by tfctl down"
    done = SweepStopped(sweep_id, cancelled=[p.index for p in cancelled])
    with job.fleet() as fleet:
        if cancelled or job.state == WAITING:
            drop(fleet, sweep_id, list(job.wants))
        inv = fleet.inventory
    for p in job.points:
        if p.state != STARTED or not p.run_id:
            continue
        try:
            with RunController(inv, ssh or job.ssh_options()) as controller:
                controller.select_run(p.run_id, hosts=(p.host or "",))
                summary = controller.down(grace_s)
            done.stopped[p.run_id] = list(summary.stopped)
            if summary.errors:
                done.errors[p.run_id] = "; ".join(str(e) for e in summary.errors.values())
        except RemoteError as exc:
            done.errors[p.run_id] = str(exc)
    if job.state == WAITING:
        job.state = CANCELLED
    job.why = f"stopped by tfctl down: {job.counts()}"
    store.write(job)
    return done
