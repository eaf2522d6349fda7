"""The waiter of a job queued from this machine: `python -m tfctl.remote.queue.waiter RECORD`.

`start_waiter` starts it in a session of its own (setsid), so closing the terminal does not end
it, its output into the job's log (`ID.log` beside the record). It runs on this machine: a
laptop that sleeps or shuts down stops it, and its tickets go stale after a minute and a half,
holding nobody back.

One loop for both kinds of waiting job (record.py): every `poll_s` seconds it looks at the hosts
the job waits on (look.py, which also refreshes its tickets there) and leaves its ticket again
where a host lost it (its /tmp emptied); when the look says the job may start (turn.py for an
`up --when-free` job, points.py for a sweep's points) it starts it here, in this process,
through `RunController` and the hosts' `Engine` (upstart.py: the `up` it was queued with;
remote/oneoff.py: each point a run). A start that lost a race for its GPUs (someone took one
between the look and the start: a typed error, upstart.RACE_LOST, oneoff.RACE_LOST) waits again
in its place; any other failure of an `up` ends the wait. The wait ends once nothing waits (its
tickets then go: the runs' claims hold the GPUs), after the job's timeout, or on SIGTERM (`tfctl
queue cancel`, `tfctl down --run SWEEP`) or SIGINT; SIGHUP is ignored: no terminal is its own.
A signal during a start stops what that start began, as Ctrl-C does to `tfctl up`.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import FrameType
from typing import TYPE_CHECKING, Any

from tfctl.remote.connect.fleet import Fleet
from tfctl.remote.queue import record as store
from tfctl.remote.queue.record import (
    CANCELLED,
    FAILED,
    STARTED,
    TIMED_OUT,
    WaitingJob,
)
from tfctl.remote.queue.tickets import drop
from tfctl.remote.queue.turn import Hold

if TYPE_CHECKING:
    from tfctl.inventory.model import Inventory
    from tfctl.inventory.oneoff import Point
    from tfctl.remote.queue.upstart import UpStart

MODULE = "tfctl.remote.queue.waiter"

Say = Callable[[str], None]


def start_waiter(job: WaitingJob) -> int:
    """The job's waiter, in a session of its own (no terminal: closing ours does not reach it),
    its output into the job's log, started in the folder the job was queued from; its pid."""
    log = open(job.log, "ab")  # noqa: SIM115 - handed to the child, closed here after
    try:
        child = subprocess.Popen([sys.executable, "-m", MODULE, str(store.record_path(job.id))],
                                 stdin=subprocess.DEVNULL, stdout=log, stderr=log, cwd=job.cwd,
                                 start_new_session=True, close_fds=True)
    finally:
        log.close()
    return child.pid


def log(text: str) -> None:
    """A line of a waiter's log (its output, the record's `ID.log`), after the local time."""
    print(time.strftime("%Y-%m-%d %H:%M:%S ") + text, flush=True)


@dataclass
class Looked:
    """What one look found: what the job waits for, and whether something may start now."""

    why: str
    may_start: bool = False


@dataclass
class Started:
    """What one start did: `ended` the state the whole wait ends in (None: it waits on), what
    the job waits for now, the lines to log."""

    ended: str | None = None
    why: str = ""
    lines: list[str] = field(default_factory=list)


class Stop:
    """SIGTERM and SIGINT: `stop` set; during a start (`starting`), the first one also raises
    KeyboardInterrupt there, so that the start stops what it began (runs/up/rollback.py)."""

    def __init__(self) -> None:
        self.event = threading.Event()
        self.starting = False

    def install(self) -> None:
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, self.on_signal)
        signal.signal(signal.SIGINT, self.on_signal)

    def on_signal(self, signum: int, frame: FrameType | None) -> None:
        first = not self.event.is_set()
        self.event.set()
        if first and self.starting:
            raise KeyboardInterrupt(f"interrupted by {signal.Signals(signum).name} while it "
                                    "started")


class UpWaiting:
    """An `up --when-free` job: its turn on every host it waits on, then its `up`."""

    again_at_once = False
    """After a start that lost a race, it waits `poll_s` before it looks again."""

    def __init__(self, job: WaitingJob) -> None:
        self.job = job
        self.run_id: str | None = None
        self.outcomes: list[UpStart] = []
        """How each of its starts went."""

    def first_words(self) -> str:
        return "waiting for " + ", ".join(f"{h}: {w.words()}" for h, w in self.job.wants.items())

    def look(self, fleet: Fleet, say: Say) -> Looked:
        from tfctl.remote.queue.look import look
        from tfctl.remote.queue.tickets import put
        from tfctl.remote.queue.turn import turns

        job = self.job
        found = turns(look(fleet, job.id, list(job.wants)), job.id, job.wants)
        lost = found.held_by(Hold.NO_TICKET)
        if lost:  # the host lost it (its /tmp was emptied): queue again, at the back
            say(f"ticket gone from {', '.join(lost)}: queued there again")
            put(fleet, job.id, job.job, {h: job.wants[h] for h in lost}, job.client)
        return Looked(found.why(), found.ready)

    def start(self, stop: Stop, say: Say) -> Started:
        from tfctl.remote.queue.upstart import start_up

        say("its turn: up " + " ".join(self.job.up_args))
        stop.starting = True
        try:
            outcome = start_up(self.job, say)
        finally:
            stop.starting = False
        self.outcomes.append(outcome)
        if outcome.run_id is not None:
            self.run_id = outcome.run_id
            return Started(STARTED, f"run {outcome.run_id} started")
        if outcome.lost is not None:
            return Started(None, "lost its GPUs to another job just now: waiting again",
                           [f"lost a race for its GPUs: {outcome.lost}"])
        error = str(outcome.error).strip().splitlines() or [type(outcome.error).__name__]
        return Started(FAILED, f"error: {error[0]}")

    def note(self, why: str) -> None:
        self.job = store.update(self.job, why=why)

    def ending(self, state: str, why: str) -> str:
        return why

    def ended(self, state: str, why: str) -> None:
        self.job = store.update(self.job, state=state, why=why, run_id=self.run_id,
                                ended_at=time.time())


class SweepWaiting:
    """A sweep's waiting points: as many placed and started at each look as have free GPUs."""

    again_at_once = True
    """After its points started, it looks again at once: more may fit, or the next in line
    may start."""

    def __init__(self, job: WaitingJob) -> None:
        self.job = job
        self.placed: list[tuple[int, Point, str, tuple[int, ...], Mapping[str, Any]]] = []
        self.inventory: Inventory | None = None

    def first_words(self) -> str:
        each = self.job.gpus_each
        return (f"{len(self.job.waiting_points())} points wait for {each} free GPU"
                f"{'s' if each != 1 else ''} each on {', '.join(self.job.wants)}")

    def look(self, fleet: Fleet, say: Say) -> Looked:
        from tfctl.remote.oneoff import place
        from tfctl.remote.queue.tickets import put_count

        job = self.job
        waiting = job.waiting_points()
        placement, _views = place(fleet, fleet.inventory, job.id, job.gpus_each, len(waiting),
                                  list(job.wants))
        lost = placement.held_by(Hold.NO_TICKET)
        if lost:  # the host lost it (its /tmp was emptied): queued there again
            say(f"ticket gone from {', '.join(lost)}: queued there again")
            put_count(fleet, job.id, job.job, job.gpus_each, lost, job.client)
        self.inventory = fleet.inventory
        self.placed = [(p.index, p.point, host, gpus, p.run)
                       for p, (host, gpus) in zip(waiting, placement.taken, strict=False)]
        return Looked(placement.words() or "its turn", bool(self.placed))

    def start(self, stop: Stop, say: Say) -> Started:
        from tfctl.remote.engines.engine import UpOptions
        from tfctl.remote.oneoff import start_points
        from tfctl.remote.queue.sweep import took

        assert self.inventory is not None  # set by the look that placed them
        job = self.job
        results = start_points(self.inventory, job.ssh_options(), self.placed,
                               UpOptions(sync=False), say)
        lines = took(job.points, results)
        store.write(job)
        return Started(None if job.waiting_points() else STARTED, job.why, lines)

    def note(self, why: str) -> None:
        self.job.why = why
        store.write(self.job)

    def ending(self, state: str, why: str) -> str:
        for p in self.job.waiting_points():
            p.state = CANCELLED if state == CANCELLED else TIMED_OUT
            p.why = state
        return self.job.counts()

    def ended(self, state: str, why: str) -> None:
        job = self.job
        job.state, job.why, job.ended_at = state, why, time.time()
        store.write(job)


def wait(job: WaitingJob, stop: Stop, say: Say = log,
         waiting: UpWaiting | SweepWaiting | None = None) -> str:
    """Wait for the job's turn and start it (module doc); the state it ended in. `waiting`:
    the look and the start of the job's kind (default: its record's)."""
    if waiting is None:
        waiting = SweepWaiting(job) if job.kind == "sweep" else UpWaiting(job)
    say(waiting.first_words())
    state, why, said = CANCELLED, "cancelled", None
    while True:
        if stop.event.is_set():
            state, why = CANCELLED, "cancelled"
            break
        if time.time() > job.deadline:
            state, why = TIMED_OUT, f"still waiting after {job.timeout_s:g} s: {said}"
            break
        try:
            with job.fleet() as fleet:
                looked = waiting.look(fleet, say)
        except Exception as exc:  # an inventory edited meanwhile, a host down: look again
            looked = Looked(f"cannot look: {exc}")
        if looked.may_start:
            try:
                started = waiting.start(stop, say)
            except KeyboardInterrupt:  # a signal during the start, which stopped what it began
                state, why = CANCELLED, "cancelled"
                break
            for line in started.lines:
                say(line)
            if started.ended is not None:
                state, why = started.ended, started.why
                break
            if stop.event.is_set():
                continue
            if waiting.again_at_once:
                waiting.note(looked.why)
                said = None
                continue
            looked.why = started.why
        if looked.why != said:
            say(looked.why)
            said = looked.why
            waiting.note(looked.why)
        stop.event.wait(job.poll_s)
    why = waiting.ending(state, why)
    say(f"{state}: {why}")
    try:
        with job.fleet() as fleet:
            drop(fleet, job.id, list(job.wants))
    except Exception as exc:  # stale within minutes anyway, holding nobody back
        say(f"could not remove its tickets: {exc}")
    waiting.ended(state, why)  # after its tickets went: whoever reads the record sees them gone
    return state


def main(path: str) -> int:
    """The waiter of the record at `path`: 0 once its job started, 1 if it ended otherwise,
    2 where there is no record."""
    record_id = path.rsplit("/", 1)[-1].removesuffix(".json")
    job = store.read(record_id)
    if job is None:
        log(f"no record at {path}")
        return 2
    stop = Stop()
    stop.install()
    return 0 if wait(job, stop) == STARTED else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
