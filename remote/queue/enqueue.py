"""Queueing a job from this machine: its tickets left on the hosts, its record written, its
waiter started (waiter.py); and cancelling it.

`queue_up` is `tfctl up --when-free`'s: a ticket on every host whose GPUs the plan needs, then
the first look (its place in each host's line, what it waits for). `queue_sweep` is `tfctl
run`'s for the points that found no GPU now: their sweep's record and waiter (its tickets are
left by `run`, remote/oneoff.py). `cancel` is `tfctl queue cancel`'s.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from tfctl.inventory.model import Inventory
from tfctl.remote.connect.transport import SshOptions
from tfctl.remote.queue import record as store
from tfctl.remote.queue.ids import kind_of, new_queued_id
from tfctl.remote.queue.record import CANCELLED, STARTED, WAITING, WaitingJob, WaitingPoint
from tfctl.remote.queue.tickets import Want, drop
from tfctl.remote.queue.turn import Turns
from tfctl.remote.queue.upstart import UpRequest
from tfctl.remote.queue.waiter import start_waiter


class NothingToWaitFor(ValueError):
    """The plan puts no task on a GPU: `up` needs no queue."""


@dataclass(frozen=True)
class Origin:
    """Where a job is queued from: its inventory and the connection options it was given."""

    inventory: str
    """The inventory file's path (kept absolute in the record)."""
    hostfile: str | None
    ssh: SshOptions

    def client(self) -> str:
        """This machine's name, which the hosts' tickets show."""
        return socket.gethostname()

    def job(self, record_id: str, job: str, wants: dict[str, Want], timeout_s: float, *,
            up_args: Sequence[str] = (), gpus_each: int = 0,
            points: Sequence[WaitingPoint] = ()) -> WaitingJob:
        """The record of a job queued now from here (the current folder, this machine)."""
        return WaitingJob(
            record_id, kind_of(record_id), os.path.abspath(self.inventory),
            None if self.hostfile is None else os.path.abspath(self.hostfile), os.getcwd(),
            job, self.client(), self.ssh.connect_timeout_s,
            self.ssh.accept_new_host_keys, self.ssh.persist_s, wants, time.time(), timeout_s,
            store.poll_s(), store.log_path(record_id), up_args=list(up_args),
            gpus_each=gpus_each, points=list(points))


@dataclass
class Queued:
    """What queueing did: the job (None: nothing was queued), its first look, and the hosts
    where its ticket could not be left (then none was)."""

    job: WaitingJob | None
    first: Turns = field(default_factory=Turns)
    failed: dict[str, str] = field(default_factory=dict)


def queue_up(inv: Inventory, origin: Origin, request: UpRequest, timeout_s: float) -> Queued:
    """`up --when-free`: the job of `inv` (the inventory less the hosts `--only/--exclude` leave
    out) queued on the hosts whose GPUs its plan needs, and its waiter started. Raises
    `NothingToWaitFor` when the plan puts no task on a GPU; all or nothing: a host that refuses
    the ticket leaves none queued anywhere."""
    from tfctl.inventory.plan import make_plan
    from tfctl.remote.connect.fleet import Fleet
    from tfctl.remote.queue.look import look
    from tfctl.remote.queue.tickets import put, wants_of
    from tfctl.remote.queue.turn import turns

    wants = wants_of(make_plan(inv))
    if not wants:
        raise NothingToWaitFor("the plan puts no task on a GPU: nothing to wait for "
                               "(run `tfctl up`)")
    ticket_id = new_queued_id()
    job = origin.job(ticket_id, inv.name, wants, timeout_s, up_args=request.to_args())
    with Fleet(inv, origin.ssh) as fleet:
        left = put(fleet, ticket_id, inv.name, wants, job.client)
        if left.failed:
            drop(fleet, ticket_id, list(left.succeeded))
            return Queued(None, failed={h: str(e) for h, e in left.failed.items()})
        first = turns(look(fleet, ticket_id, list(wants)), ticket_id, wants)
    job.why = first.why() or "its turn: starting"
    store.write(job)
    job.waiter_pid = start_waiter(job)
    store.write(job)
    return Queued(job, first)


def queue_sweep(origin: Origin, sweep_id: str, job: str, gpus_each: int, hosts: Sequence[str],
                points: Sequence[WaitingPoint], timeout_s: float, why: str) -> WaitingJob:
    """A sweep's record (its points as their first starts left them), and its waiter started
    when any waits."""
    record = origin.job(sweep_id, job, {h: Want(count=gpus_each) for h in hosts}, timeout_s,
                        gpus_each=gpus_each, points=list(points))
    waiting = bool(record.waiting_points())
    record.state = WAITING if waiting else STARTED
    record.why = why if waiting else ""
    store.write(record)
    if waiting:
        record.waiter_pid = start_waiter(record)
        store.write(record)
    return record


@dataclass(frozen=True)
class Cancelled:
    """What `tfctl queue cancel` did."""

    job: WaitingJob
    was: str
    """Its state before."""
    waiter_stopped: bool
    tickets_removed: tuple[str, ...]
    failed: dict[str, str]
    """Host → why its ticket could not be removed."""


def cancel(job: WaitingJob) -> Cancelled:
    """Stop the job's waiter (SIGTERM: it removes its tickets as it ends), remove its tickets
    (a waiter that is gone cannot), and mark it cancelled if it still waited."""
    was = job.state
    stopped = False
    if store.waiter_alive(job):
        with contextlib.suppress(ProcessLookupError):
            os.kill(int(job.waiter_pid or 0), signal.SIGTERM)
            stopped = True
        deadline = time.monotonic() + 30
        while store.waiter_alive(job) and time.monotonic() < deadline:
            time.sleep(0.2)
    with job.fleet() as fleet:
        dropped = drop(fleet, job.id, list(job.wants))
    if was == WAITING:
        job = store.update(job, state=CANCELLED, why=CANCELLED)
    else:
        job = store.read(job.id) or job
    return Cancelled(job, was, stopped,
                     tuple(sorted(h for h, a in dropped.succeeded.items() if a.dropped)),
                     {h: str(e) for h, e in dropped.failed.items()})
