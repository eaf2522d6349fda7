"""Live GPU telemetry: one long-lived `nvidia-smi ... -lms N` stream per host, all read as one.

Why a stream and not a call per tick: each `nvidia-smi` start initialises NVML (tens to hundreds of
ms of CPU on the host) and costs an SSH exec round trip; a loop keeps NVML open and only prints.
Compute apps (who uses which GPU) change slowly and have no loop-mode block marker we can rely on
(an empty list prints nothing), so they are polled with one `transport.run` every `apps_every`
ticks. What the driver supports is probed once per host (`--help-query-gpu`: an unknown field fails
the whole query) together with the GPU list, so the first block is known complete when it is.

Threads: one reader per host (probe, stream, reconnect with backoff; a slow or dead host never
delays another) and one watchdog that closes a stream silent for too long (a cut link leaves a
blocking read waiting forever). The UI side (`snapshot`, `snapshots`, `history`) never blocks.
"""

from __future__ import annotations

import functools
import shlex
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace

from tfctl.remote.connect.fleet import Fleet
from tfctl.remote.connect.host_scripts import host_script, render
from tfctl.remote.connect.transport import Stream, Transport
from tfctl.remote.errors import HostUnreachable, RemoteError
from tfctl.remote.gpus.lastseen import (
    DEFAULT_HISTORY_LENGTH,
    DEFAULT_STALE_AFTER_S,
    GpuHistory,
    HostTelemetry,
)
from tfctl.remote.gpus.nvsmi import (
    BASE_GPU_FIELDS,
    DEFAULT_COMPUTE_APP_FIELDS,
    WANTED_COMPUTE_APP_FIELDS,
    WANTED_GPU_FIELDS,
    GpuProcess,
    GpuSample,
    HostError,
    LoopParser,
    is_host_error_line,
    parse_compute_apps,
    parse_gpu_rows,
    query_compute_apps_argv,
    query_gpu_argv,
    supported_fields,
)

_MARK = "@@tfctl-telemetry:"
NO_NVIDIA_SMI = "no nvidia-smi on this host's PATH"
NO_GPUS_RECHECK_S = 60.0  # a GPU-less host is asked again this rarely, and said once


@dataclass(frozen=True)
class Probe:
    """What one host's nvidia-smi is: absent, GPU-less, failing, or these fields and GPUs."""

    gpu_fields: tuple[str, ...] = BASE_GPU_FIELDS
    app_fields: tuple[str, ...] = DEFAULT_COMPUTE_APP_FIELDS
    uuids: tuple[str, ...] = ()
    no_gpus: str | None = None  # why there is nothing to show ("no nvidia-smi", "No devices...")
    error: str | None = None  # nvidia-smi is there but failed (e.g. NVML version mismatch)


@functools.lru_cache(maxsize=1)
def probe_script() -> str:
    """One round trip (`remote/agent/telemetry_probe.sh`): is nvidia-smi there, what it can be
    asked, and which GPUs it sees now."""
    return render(host_script("telemetry_probe.sh"), MARK=_MARK)


def parse_probe(stdout: str) -> Probe:
    """Read `probe_script()`'s output. Pure."""
    if stdout.strip() == _MARK + "none":
        return Probe(no_gpus=NO_NVIDIA_SMI)
    sections: dict[str, list[str]] = {"gpu": [], "apps": [], "gpus": []}
    current = "gpu"
    for line in stdout.splitlines():
        if line.startswith(_MARK):
            current = line[len(_MARK):].strip()
            sections.setdefault(current, [])
            continue
        sections[current].append(line)
    gpu_fields = supported_fields("\n".join(sections["gpu"]), WANTED_GPU_FIELDS)
    app_fields = supported_fields("\n".join(sections["apps"]), WANTED_COMPUTE_APP_FIELDS)
    listing = parse_gpu_rows("\n".join(sections["gpus"]), ("uuid",))
    errors = [e for e in listing.errors if not HostError(e).is_no_devices]
    no_devices = any(HostError(e).is_no_devices for e in listing.errors)
    has_pid = any(f == "pid" for f in app_fields)
    return Probe(
        gpu_fields=gpu_fields if "uuid" in gpu_fields else BASE_GPU_FIELDS,
        app_fields=app_fields if has_pid and "gpu_uuid" in app_fields
        else DEFAULT_COMPUTE_APP_FIELDS,
        uuids=tuple(s.uuid for s in listing.samples),
        no_gpus="No devices were found" if no_devices and not listing.samples else None,
        error="; ".join(errors) if errors else None,
    )


class BlockAssembler:
    """Groups loop-mode rows into ticks: a block ends when every known GPU has reported, or when a
    GPU reports twice (the set of GPUs changed). Pure."""

    def __init__(self, expected_uuids: Sequence[str] = ()) -> None:
        self._expected = frozenset(expected_uuids)
        self._pending: dict[str, GpuSample] = {}

    def add(self, sample: GpuSample) -> list[tuple[GpuSample, ...]]:
        done = []
        if sample.uuid in self._pending:
            done.append(self._flush())
        self._pending[sample.uuid] = sample
        if self._expected and self._expected <= self._pending.keys():
            done.append(self._flush())
        return done

    def _flush(self) -> tuple[GpuSample, ...]:
        block = tuple(sorted(self._pending.values(),
                             key=lambda s: (s.index is None, s.index or 0, s.uuid)))
        self._expected = frozenset(self._pending)
        self._pending = {}
        return block


@dataclass(frozen=True)
class StreamInfo:
    """Diagnostics of one host's stream (for tests, `--json` and a details pane)."""

    host: str
    restarts: int = 0  # streams that ended and were reopened
    blocks: int = 0  # complete ticks received since start
    last_error: str | None = None  # why the last stream (or probe) ended, kept after recovery
    gpu_fields: tuple[str, ...] = ()
    apps_error: str | None = None


@dataclass
class _HostState:
    telemetry: HostTelemetry
    info: StreamInfo
    no_gpus: bool = False


@dataclass
class _Session:
    """The open stream of one host, shared with the watchdog and `stop`."""

    stream: Stream | None = None
    waiting_since: float | None = None
    closed_why: str | None = None  # set when the watchdog closed it
    lock: threading.Lock = field(default_factory=threading.Lock)


@dataclass(frozen=True)
class _Ended:
    why: str
    got_block: bool = False
    no_devices: bool = False
    error_type: type[Exception] | None = None  # the class of what was raised, if anything

    @property
    def unreachable(self) -> bool:
        """The host did not answer (`HostUnreachable`): retried sooner than other failures."""
        return self.error_type is not None and issubclass(self.error_type, HostUnreachable)


class TelemetryStreams:
    """Every host's GPUs, live. Satisfies `tfctl.tui.app.sources.TelemetrySource`.

    `start()` launches the threads; `snapshot(host)` / `snapshots()` return the latest
    `HostTelemetry` (never blocking); `history` holds recent samples per GPU; `stop()` ends it all.
    The fleet stays the caller's (the streams use its transports, it does not close them).
    """

    def __init__(self, fleet: Fleet, interval_ms: int = 1000, apps_every: int = 2, *,
                 hosts: Sequence[str] | None = None, history_length: int = DEFAULT_HISTORY_LENGTH,
                 backoff_s: float = 1.0, max_backoff_s: float = 30.0,
                 silence_s: float | None = None, apps_timeout_s: float = 10.0,
                 unreachable_retry_s: float = 5.0, clock: Callable[[], float] = time.monotonic
                 ) -> None:
        if interval_ms <= 0 or apps_every <= 0:
            raise ValueError("interval_ms and apps_every must be positive")
        self.fleet = fleet
        self.interval_ms = interval_ms
        self.apps_every = apps_every
        self.hosts = tuple(hosts if hosts is not None else (h.name for h in fleet.inventory.hosts))
        self.backoff_s, self.max_backoff_s = backoff_s, max_backoff_s
        # A stream that printed nothing for this long is closed and reopened.
        self.silence_s = silence_s if silence_s is not None else max(
            DEFAULT_STALE_AFTER_S, 3 * interval_ms / 1000)
        # A host that does not answer is retried at least this often: a healed link shows soon.
        self.apps_timeout_s, self.unreachable_retry_s = apps_timeout_s, unreachable_retry_s
        self.clock = clock
        self._history = GpuHistory(history_length)
        self._lock = threading.Lock()
        self._states = {h: _HostState(HostTelemetry(h), StreamInfo(h)) for h in self.hosts}
        self._sessions = {h: _Session() for h in self.hosts}
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    # -- the UI side (never blocks) ------------------------------------------------------
    @property
    def history(self) -> GpuHistory:
        return self._history

    def snapshot(self, host: str) -> HostTelemetry:
        with self._lock:
            state = self._states.get(host)
            if state is None:
                return HostTelemetry(host, error="not watched by this telemetry")
            if state.no_gpus and state.telemetry.error is None:
                # "No GPUs" does not age: it is as current as the last time we asked.
                return replace(state.telemetry, last_sample_at=self.clock())
            return state.telemetry

    def snapshots(self) -> dict[str, HostTelemetry]:
        return {host: self.snapshot(host) for host in self.hosts}

    def info(self, host: str) -> StreamInfo:
        with self._lock:
            return self._states[host].info

    # -- lifecycle -----------------------------------------------------------------------
    def start(self) -> None:
        if self._threads:
            return
        self._stop.clear()
        self._threads = [threading.Thread(target=self._run_host, args=(host,),
                                          name=f"telemetry-{host}", daemon=True)
                         for host in self.hosts]
        self._threads.append(threading.Thread(target=self._watchdog, name="telemetry-watchdog",
                                              daemon=True))
        for thread in self._threads:
            thread.start()

    def stop(self, timeout_s: float = 5.0) -> None:
        """End every stream and wait (at most `timeout_s` in all) for the threads; a thread
        stuck in a host's connect timeout is a daemon and ends on its own."""
        self._stop.set()
        for host in self.hosts:
            self._close_stream(host)
        deadline = time.monotonic() + timeout_s
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        self._threads = []

    def wait_first(self, timeout_s: float) -> bool:
        """Block until every host has answered once (samples, no GPUs or an error)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with self._lock:
                pending = [h for h, s in self._states.items() if s.telemetry.error is None
                           and not s.no_gpus and s.telemetry.last_sample_at is None]
            if not pending:
                return True
            time.sleep(0.05)
        return False

    # -- one host's thread ---------------------------------------------------------------
    def _run_host(self, host: str) -> None:
        probe: Probe | None = None
        failures = 0
        while not self._stop.is_set():
            tried = self.clock()
            try:
                transport = self.fleet.transport(host)
                if probe is None or probe.no_gpus or probe.error:
                    probe = self._probe(transport)
                if probe.no_gpus:
                    self._set_no_gpus(host, probe.no_gpus)
                    failures = 0
                    self._stop.wait(NO_GPUS_RECHECK_S)
                    continue
                ended = _Ended(probe.error) if probe.error else self._follow(
                    host, transport, probe)
            except RemoteError as exc:
                ended = _Ended(str(exc), error_type=type(exc))
            except Exception as exc:  # a reader thread must never die silently: say why
                ended = _Ended(f"telemetry failed: {type(exc).__name__}: {exc}")
            if self._stop.is_set():
                break
            if ended.no_devices:
                probe = Probe(no_gpus=ended.why)
                continue
            failures = 1 if ended.got_block else failures + 1
            self._set_error(host, ended, tried)
            wait = min(self.max_backoff_s, self.backoff_s * 2 ** (failures - 1))
            self._stop.wait(min(wait, self.unreachable_retry_s)
                            if ended.unreachable else wait)

    def _probe(self, transport: Transport) -> Probe:
        result = transport.run(probe_script(), timeout_s=max(10.0, self.silence_s))
        return parse_probe(result.stdout)

    def _follow(self, host: str, transport: Transport, probe: Probe) -> _Ended:
        """Read one stream until it ends; say why it ended and whether a block arrived."""
        argv = query_gpu_argv(probe.gpu_fields, self.interval_ms)
        stream = transport.stream("exec " + shlex.join(argv) + " 2>&1")
        session = self._sessions[host]
        with session.lock:
            session.stream, session.closed_why = stream, None
        if self._stop.is_set():
            self._close_stream(host)
        parser = LoopParser(probe.gpu_fields)
        blocks = BlockAssembler(probe.uuids)
        host_errors: list[str] = []
        got_block = False
        try:
            for line in self._timed_lines(session, stream.lines()):
                item = parser.feed(line)
                if isinstance(item, HostError):
                    if item.is_no_devices:
                        return _Ended(item.message, got_block, no_devices=True)
                    host_errors.append(item.message)
                elif isinstance(item, GpuSample):
                    for block in blocks.add(item):
                        self._publish(host, transport, probe, block, host_errors)
                        host_errors, got_block = [], True
        finally:
            self._close_stream(host)
        why = "; ".join(host_errors) or session.closed_why or "the nvidia-smi stream ended"
        return _Ended(why, got_block)

    def _timed_lines(self, session: _Session, lines: Iterator[str]) -> Iterator[str]:
        """The stream's lines, with the wait for each one visible to the watchdog."""
        while True:
            session.waiting_since = self.clock()
            line = next(lines, None)
            session.waiting_since = None
            if line is None:
                return
            yield line

    def _publish(self, host: str, transport: Transport, probe: Probe,
                 block: tuple[GpuSample, ...], host_errors: list[str]) -> None:
        now = self.clock()
        with self._lock:
            state = self._states[host]
            tick = state.info.blocks
        processes, apps_error = None, state.info.apps_error
        if tick % self.apps_every == 0:
            processes, apps_error = self._poll_apps(transport, probe)
        with self._lock:
            state = self._states[host]
            keep = state.telemetry.processes if processes is None else tuple(processes)
            state.telemetry = HostTelemetry(
                host, gpus=block, processes=keep,
                error="; ".join(host_errors) if host_errors else None, last_sample_at=now)
            state.no_gpus = False
            state.info = replace(state.info, blocks=tick + 1, gpu_fields=probe.gpu_fields,
                                 apps_error=apps_error)
            self._history.record(host, block, now)

    def _poll_apps(self, transport: Transport, probe: Probe
                   ) -> tuple[list[GpuProcess] | None, str | None]:
        """The compute apps now, or (None, why) to keep the last known ones."""
        argv = query_compute_apps_argv(probe.app_fields)
        try:
            result = transport.run(shlex.join(argv) + " 2>&1", timeout_s=self.apps_timeout_s)
        except RemoteError as exc:
            return None, str(exc)
        errors = [line for line in result.stdout.splitlines() if is_host_error_line(line)]
        if errors or not result.ok:
            return None, "; ".join(errors) or f"compute apps query exited {result.exit_code}"
        return parse_compute_apps(result.stdout, probe.app_fields), None

    def _set_error(self, host: str, ended: _Ended, tried: float) -> None:
        with self._lock:  # the wait began at a quiet stream's last sample, else at `tried`
            state = self._states[host]
            last = state.telemetry.last_sample_at
            since = last if ended.got_block and last is not None else tried
            state.telemetry = state.telemetry.with_error(ended.why, ended.error_type, since)
            state.info = replace(state.info, restarts=state.info.restarts + 1, last_error=ended.why)

    def _set_no_gpus(self, host: str, why: str) -> None:
        with self._lock:
            state = self._states[host]
            if not state.no_gpus or state.telemetry.error is not None:
                state.telemetry = HostTelemetry(host, last_sample_at=self.clock())
                state.info = replace(state.info, last_error=why)
            state.no_gpus = True

    # -- shared ----------------------------------------------------------------------------
    def _close_stream(self, host: str, why: str | None = None) -> None:
        session = self._sessions[host]
        with session.lock:
            stream, session.stream = session.stream, None
            if stream is not None and why is not None:
                session.closed_why = why
        if stream is not None:
            stream.close()

    def _watchdog(self) -> None:
        """Close streams that have printed nothing for `silence_s` (their reader then sees EOF)."""
        period = min(1.0, self.silence_s / 4)
        while not self._stop.wait(period):
            now = self.clock()
            for host, session in self._sessions.items():
                since = session.waiting_since
                if since is not None and session.stream is not None \
                        and now - since > self.silence_s:
                    self._close_stream(host, f"no output from nvidia-smi for "
                                             f"{self.silence_s:g} s (link cut or host stuck)")
