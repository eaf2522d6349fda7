"""What was last seen of the GPUs: the recent samples of each GPU (`GpuHistory`, a bounded ring)
and an immutable per-host snapshot (`HostTelemetry`). Pure: time is passed in.

Why keyed by (host, uuid) and not uuid alone: real UUIDs are unique, but masked captures and
simulated hosts can repeat them, and a host's history must go away with the host.
Why `last_sample_at` is monotonic seconds: staleness must not jump when a host's wall clock (or
ours) is adjusted; nvidia-smi's own timestamp is kept on each sample for display only.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, replace
from enum import Enum
from itertools import islice
from typing import Any

from tfctl.remote.errors import HostUnreachable
from tfctl.remote.gpus.nvsmi import (
    NUMERIC_SAMPLE_ATTRS,
    GpuProcess,
    GpuSample,
    HostError,
    ParseResult,
)
from tfctl.remote.reach import reach_json, unreachable_words

DEFAULT_HISTORY_LENGTH = 120  # two minutes at nvidia-smi's useful ~1 Hz
DEFAULT_STALE_AFTER_S = 5.0  # several missed 1 s samples: the stream or the host is stuck


@dataclass(frozen=True)
class TimedSample:
    at_s: float  # monotonic seconds on our side, when the sample arrived
    sample: GpuSample


class GpuHistory:
    """A bounded ring of recent samples per (host, GPU uuid); the oldest fall off."""

    def __init__(self, length: int = DEFAULT_HISTORY_LENGTH) -> None:
        if length <= 0:
            raise ValueError(f"history length must be positive, got {length}")
        self.length = length
        self._rings: dict[tuple[str, str], deque[TimedSample]] = {}

    def record(self, host: str, samples: Iterable[GpuSample], at_s: float) -> None:
        for sample in samples:
            key = (host, sample.uuid)
            ring = self._rings.get(key)
            if ring is None:
                ring = self._rings[key] = deque(maxlen=self.length)
            ring.append(TimedSample(at_s, sample))

    def recent(self, host: str, uuid: str) -> tuple[TimedSample, ...]:
        """Oldest first."""
        return tuple(self._rings.get((host, uuid), ()))

    def latest(self, host: str, uuid: str) -> TimedSample | None:
        ring = self._rings.get((host, uuid))
        return ring[-1] if ring else None

    def series(self, host: str, uuid: str, attr: str,
               last: int | None = None) -> tuple[float | None, ...]:
        """One numeric attribute over time (e.g. 'utilization_gpu_pct'), oldest first; gaps None.
        `last`: only the newest `last` samples, read without walking the whole ring (a
        sparkline, every second for every GPU)."""
        if attr not in NUMERIC_SAMPLE_ATTRS:
            raise ValueError(f"{attr!r} is not a numeric GpuSample attribute")
        ring = self._rings.get((host, uuid), ())
        if last is not None:
            newest = [getattr(timed.sample, attr) for timed in islice(reversed(ring), last)]
            return tuple(reversed(newest))
        return tuple(getattr(timed.sample, attr) for timed in ring)

    def keys(self) -> tuple[tuple[str, str], ...]:
        return tuple(self._rings)

    def forget_host(self, host: str) -> None:
        for key in [key for key in self._rings if key[0] == host]:
            del self._rings[key]


class TelemetryState(str, Enum):
    OK = "ok"
    STALE = "stale"  # no sample yet, or none for longer than the threshold
    NO_GPUS = "no_gpus"  # nvidia-smi answered and there is nothing to show
    ERROR = "error"  # nvidia-smi (or getting to it) failed; `error` says how


@dataclass(frozen=True)
class HostTelemetry:
    """What we last knew about one host's GPUs. On error the last good GPUs may be kept."""

    host: str
    gpus: tuple[GpuSample, ...] = ()
    processes: tuple[GpuProcess, ...] = ()
    error: str | None = None
    last_sample_at: float | None = None  # monotonic seconds of the last good sample
    error_type: type[Exception] | None = None  # the class of the error (`HostUnreachable`)
    failing_since: float | None = None  # monotonic: when the current run of errors began

    @property
    def unreachable(self) -> bool:
        """The last error is the host's own silence, not nvidia-smi's failure."""
        return self.error is not None and self.error_type is not None \
            and issubclass(self.error_type, HostUnreachable)

    def unreachable_since(self) -> float | None:
        """Monotonic seconds since which this host has not answered (when tfctl began waiting
        for the answer that never came: the failing run's start); None while it answers."""
        if not self.unreachable:
            return None
        return self.failing_since if self.failing_since is not None else self.last_sample_at

    def staleness_s(self, now: float) -> float | None:
        """Seconds since the last good sample; None if there never was one."""
        return None if self.last_sample_at is None else max(0.0, now - self.last_sample_at)

    def state(self, now: float, stale_after_s: float = DEFAULT_STALE_AFTER_S) -> TelemetryState:
        if self.error is not None:
            return TelemetryState.ERROR
        staleness = self.staleness_s(now)
        if staleness is None or staleness > stale_after_s:
            return TelemetryState.STALE
        return TelemetryState.OK if self.gpus else TelemetryState.NO_GPUS

    def unreachable_since_wall(self, now: float, wall_now: float) -> float | None:
        """`unreachable_since` on the wall clock (`now` monotonic, `wall_now` time.time())."""
        since = self.unreachable_since()
        return None if since is None else wall_now - max(0.0, now - since)

    def reach_words(self, now: float, wall_now: float) -> str | None:
        """"unreachable since 21:16:24 (no answer for 35 s)", or None while it answers."""
        since = self.unreachable_since_wall(now, wall_now)
        return None if since is None else unreachable_words(since, wall_now)

    def reach_json(self, now: float, wall_now: float) -> dict[str, Any]:
        """"reachable", "unreachable_since" (ISO 8601) and "no_answer_s", for --json."""
        return reach_json(self.unreachable_since_wall(now, wall_now), wall_now)

    def processes_on(self, uuid: str) -> tuple[GpuProcess, ...]:
        return tuple(p for p in self.processes if p.gpu_uuid == uuid)

    def with_error(self, error: str, error_type: type[Exception] | None = None,
                   at_s: float | None = None) -> HostTelemetry:
        """The same last-known GPUs, marked failed (a UI can dim them). `error_type` is the
        exception's class where one was raised (`HostUnreachable`: the host did not answer);
        `at_s` (monotonic) is when this attempt began, kept as `failing_since` for the first
        error of a run of them."""
        kept = self.error is not None and self.failing_since is not None
        since = self.failing_since if kept else at_s
        return replace(self, error=error, error_type=error_type, failing_since=since)

    @classmethod
    def from_parse(
        cls,
        host: str,
        result: ParseResult,
        processes: Iterable[GpuProcess] = (),
        at_s: float | None = None,
    ) -> HostTelemetry:
        """Snapshot from one parsed query. "No devices were found" is a GPU-less host, not an
        error; any other error text makes the host an error even if some GPUs answered."""
        errors = [e for e in result.errors if not HostError(e).is_no_devices]
        return cls(
            host=host,
            gpus=result.samples,
            processes=tuple(processes),
            error="; ".join(errors) if errors else None,
            last_sample_at=at_s if result.samples or not errors else None,
        )
