"""The GPU watch: live telemetry (`TelemetryStreams`), which task owns each GPU (`OwnerCache`) and
what looks wrong (`findings`), wired together once for `tfctl gpus` and the dashboard.

`RunController.gpu_watch()` builds one over the controller's SSH connections. The streams satisfy
the dashboard's `TelemetrySource` as it is; `owner_of` is its `OwnerOf` (never blocks) and the
watch itself, called, is its `FindingsSource` (blocks: one agent round trip per host).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from tfctl.remote.connect.fleet import Fleet
from tfctl.remote.gpus.findings import (
    Finding,
    LogKey,
    LogMark,
    all_findings,
    policy_idle_findings,
    silence_findings,
    track_logs,
)
from tfctl.remote.gpus.lastseen import HostTelemetry
from tfctl.remote.gpus.owners import Owner, OwnerCache
from tfctl.remote.gpus.telemetry import TelemetryStreams
from tfctl.remote.runs.current import CurrentRun
from tfctl.remote.silence import Silence

OWNER_REFRESH_S = 5.0  # task pids change only when tasks start or stop


class GpuWatch:
    def __init__(self, fleet: Fleet, current: Callable[[], CurrentRun | None],
                 interval_ms: int | None = None) -> None:
        kwargs: dict[str, Any] = {} if interval_ms is None else {"interval_ms": interval_ms}
        self.streams = TelemetryStreams(fleet, **kwargs)
        self.cache = OwnerCache(fleet, self.streams.snapshots)
        self.marks: dict[LogKey, LogMark] = {}
        self._current = current
        self._stop = threading.Event()

    # -- the stream ------------------------------------------------------------------------
    def start(self) -> None:
        self.streams.start()

    def stop(self) -> None:
        self._stop.set()
        self.streams.stop()

    def wait_first(self, timeout_s: float) -> None:
        """Block until every host sent its first sample (or said why not), at most `timeout_s`."""
        self.streams.wait_first(timeout_s)

    def snapshots(self) -> Mapping[str, HostTelemetry]:
        return self.streams.snapshots()

    def clock(self) -> float:
        now: float = self.streams.clock()
        return now

    # -- owners -----------------------------------------------------------------------------
    def run_id(self) -> str | None:
        run = self._current()
        return run.run_id if run else None

    def refresh_owners(self) -> None:
        """Re-read the run's task processes (one agent round trip per host)."""
        run = self._current()
        self.cache.refresh(run.run_id if run else None, list(run.hosts) if run else [])

    def refresh_owners_every(self, seconds: float = OWNER_REFRESH_S) -> threading.Thread:
        """A daemon thread that refreshes the owners until `stop()` (hosts that fail keep no
        pids until they are back)."""
        def loop() -> None:
            while not self._stop.wait(seconds):
                self.refresh_owners()

        thread = threading.Thread(target=loop, name="tfctl-gpu-owners", daemon=True)
        thread.start()
        return thread

    def owners(self, snapshots: Mapping[str, HostTelemetry] | None = None
               ) -> Mapping[tuple[str, str], Owner]:
        return self.cache.owners(snapshots)

    def silences(self) -> tuple[Silence, ...]:
        """The hosts whose run watcher cannot reach the chief, as the owners' read found them."""
        return self.cache.silences

    def owner_of(self, host: str, uuid: str) -> str:
        """`worker:3`, `foreign pid 4242 user bob` or `idle`; reads the cache, never blocks."""
        label: str = self.cache.owner_of(host, uuid)
        return label

    # -- findings ---------------------------------------------------------------------------
    def findings(self, now: float | None = None, track: bool = True) -> tuple[Finding, ...]:
        """Every rule of `tfctl.remote.gpus.findings` over the latest state (no I/O); `track`
        notes log progress first (so "no log progress" rules can fire)."""
        now = self.clock() if now is None else now
        if track:
            self.marks = track_logs(self.marks, self.cache.tasks, now)
        found = all_findings(self.streams.snapshots(), self.streams.history, self.cache.tasks,
                             self.marks, now)
        return (*found, *silence_findings(self.cache.silences, time.time()),
                *policy_idle_findings(self.cache.idle, time.time()))

    def __call__(self) -> list[Finding]:
        """The dashboard's findings source: refresh the owners, then every finding."""
        self.refresh_owners()
        return list(self.findings(time.monotonic()))
