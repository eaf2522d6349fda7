"""What the dashboard's hub (hub.py) keeps for the tabs that read it: the reads of the hosts by
key (`SharedReads`), a run's log lines (`LogFeed`), and the GPUs' samples a tab has not had
(`samples_since`); the records a tab is answered with (`TelemetryNews`, `LogNews`). No I/O of
their own: the hub's polls and the tabs' calls drive them, from many threads at once.
"""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from tfctl.remote.gpus.lastseen import GpuHistory, HostTelemetry, TimedSample

if TYPE_CHECKING:
    from tfctl.remote.runs.logs import LogFollower

T = TypeVar("T")

FIRST_TAIL_LINES = 200
"""The lines of each task's log the first read of a run takes (the dashboard's own)."""
LOG_LINES_KEPT = 5000
"""The log lines kept for tabs: what a tab opened later starts with."""


@dataclass(frozen=True)
class TelemetryNews:
    """Every host's GPUs now, their owners' labels, and the samples since a tab's last."""

    snapshots: dict[str, HostTelemetry]
    owners: dict[tuple[str, str], str]
    samples: tuple[tuple[str, TimedSample], ...]


@dataclass(frozen=True)
class LogNews:
    """A run's log lines after a tab's `cursor`, the hosts the last read failed on, and the
    cursor to ask from next."""

    lines: list[tuple[str, str]]
    errors: dict[str, str]
    cursor: int


@dataclass
class _Read:
    lock: threading.Lock = field(default_factory=threading.Lock)
    started_s: float = -math.inf
    generation: int = -1
    value: Any = None
    error: BaseException | None = None


class SharedReads:
    """Reads of the hosts, kept by key for every tab. A read under way holds its key: whoever
    asks meanwhile waits for its answer instead of reading again. A read that failed is kept
    as its error (an unreachable host is said to every tab). `clear` (after an action) makes
    every kept read old, those under way included."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._reads: dict[Hashable, _Read] = {}
        self._lock = threading.Lock()
        self._generation = 0

    def _entry(self, key: Hashable) -> _Read:
        with self._lock:
            return self._reads.setdefault(key, _Read())

    def latest(self, key: Hashable, read: Callable[[], T]) -> T:
        """The last read of `key`, whatever its age (the hub's polls keep it fresh); read now
        if there is none since the last `clear`."""
        return self.fresh(key, math.inf, read)

    def fresh(self, key: Hashable, max_age_s: float, read: Callable[[], T]) -> T:
        """The read of `key` begun less than `max_age_s` ago, else a new one."""
        entry = self._entry(key)
        with entry.lock:
            if entry.generation != self._generation or \
                    self.clock() - entry.started_s >= max_age_s:
                self._read(entry, read)
            return self._answer(entry)

    def refresh(self, key: Hashable, read: Callable[[], object]) -> None:
        """Read `key` now (a poll of the hub's), its error kept as its answer."""
        entry = self._entry(key)
        with entry.lock:
            self._read(entry, read)

    def peek(self, key: Hashable) -> Any:
        """The last answer read for `key` since the last `clear`, or None (none, or an
        error); never reads."""
        entry = self._entry(key)
        if entry.generation != self._generation or entry.error is not None:
            return None
        return entry.value

    def failed(self, key: Hashable) -> BaseException | None:
        """The error the last read of `key` ended in, if it failed."""
        entry = self._entry(key)
        return entry.error if entry.generation == self._generation else None

    def clear(self) -> None:
        with self._lock:
            self._generation += 1

    def _read(self, entry: _Read, read: Callable[[], object]) -> None:
        entry.generation, entry.started_s = self._generation, self.clock()
        try:
            entry.value, entry.error = read(), None
        except Exception as exc:
            entry.value, entry.error = None, exc

    @staticmethod
    def _answer(entry: _Read) -> Any:
        if entry.error is not None:
            raise entry.error
        return entry.value


class LogFeed:
    """One run's logs, followed once for every tab: the hub polls (`poll`), each tab reads the
    lines from the last it has (`since`), its cursor being the next line's number."""

    def __init__(self, follower: LogFollower, keep: int = LOG_LINES_KEPT) -> None:
        self.follower = follower
        self._lines: deque[tuple[int, str, str]] = deque(maxlen=keep)
        self._next = 0
        self._errors: dict[str, str] = {}
        self._polled = False
        self._lock = threading.Lock()

    def poll(self, hosts: Sequence[str]) -> None:
        """Read the new lines from `hosts` (those that answer): the hub's poll."""
        self.follower.hosts = list(hosts)
        try:
            batch = self.follower.poll(tail_lines=None if self._polled else FIRST_TAIL_LINES)
        except Exception as exc:  # the tabs say it, as the terminal's log pane does
            lines, errors = [], {"": f"{type(exc).__name__}: {exc}"}
        else:
            lines, errors = batch.lines, dict(batch.errors)
        self._polled = True
        with self._lock:
            for task, line in lines:
                self._lines.append((self._next, task, line))
                self._next += 1
            self._errors = errors

    def since(self, cursor: int | None) -> LogNews:
        """The lines kept from `cursor` on (None: all of them)."""
        with self._lock:
            start = -1 if cursor is None else cursor
            lines = [(task, line) for n, task, line in self._lines if n >= start]
            return LogNews(lines, dict(self._errors), self._next)


def samples_since(history: GpuHistory, since_s: float | None
                   ) -> tuple[tuple[str, TimedSample], ...]:
    """Every GPU's samples from `since_s` on, oldest first (each ring read from its newest end
    back to `since_s`: a tab asks twice a second, and most of a ring it already has)."""
    found: list[tuple[str, TimedSample]] = []
    rings = history.keys()  # a GpuHistory's (host, uuid) pairs, not a dict's
    for host, uuid in rings:
        newer: list[tuple[str, TimedSample]] = []
        for timed in reversed(history.recent(host, uuid)):
            if since_s is not None and timed.at_s < since_s:
                break
            newer.append((host, timed))
        found += reversed(newer)
    return tuple(found)
