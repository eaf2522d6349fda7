"""The cluster view's data: one `HostLine` per host with its `GpuLine`s. Pure (times passed in).

A host's state joins two independent witnesses: the task polls (SSH to the agent) and the GPU
telemetry stream. The worse one wins, and a non-ok state remembers since when it holds, so a
dead host reads "unreachable since 09:42:10 (no answer for 35 s)" (`tfctl.remote.reach`) instead
of flickering, raising, or quoting the command that got no answer. Either witness may say a host
does not answer; the telemetry's word stops counting once a task poll has answered after it
began failing (its stream then only has to reconnect). An unreachable host's GPUs show their
last values dimmed with "stale since T" for an owner: never "foreign", since not reading our
tasks there is no evidence that a process on its GPU is a stranger's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from tfctl.inventory.model import Host
from tfctl.remote.gpus.lastseen import (
    DEFAULT_STALE_AFTER_S,
    GpuHistory,
    HostTelemetry,
    TelemetryState,
)
from tfctl.remote.gpus.nvsmi import GpuSample
from tfctl.remote.reach import unreachable_words
from tfctl.tui.app.model import cells
from tfctl.tui.app.model.board import DOWN, IDLE, OK, STALE, WARN, HostLink
from tfctl.tui.app.sources import FindingLike, OwnerOf

SPARK_LEN = 16
SLOW_POLL_S = 5.0  # a task poll in flight this long makes the host "not answering"
LEVEL_RANK = {OK: 0, IDLE: 0, STALE: 1, WARN: 2, DOWN: 3}
FINDING_RANK = {"info": 0, "warning": 1, "error": 2}


@dataclass(frozen=True)
class GpuLine:
    index: int | None
    uuid: str
    name: str
    util_pct: float | None
    mem_used_mib: float | None
    mem_total_mib: float | None
    temp_c: float | None
    power_w: float | None
    spark: tuple[float | None, ...]
    owner: str
    mark: str | None  # the worst finding level on this GPU
    dim: bool  # last known values of a host we cannot read now
    stale: bool = False  # its host does not answer: `owner` says since when, not who


@dataclass(frozen=True)
class HostLine:
    name: str
    address: str
    gpu_count: int
    state: str
    level: str
    gpus: tuple[GpuLine, ...]
    note: str  # e.g. "CPU only", "waiting for telemetry"
    mark: str | None  # the worst finding level on this host

    def worst_gpu(self) -> GpuLine | None:
        """The GPU a one-line summary should name: a finding first, else the least busy."""
        if not self.gpus:
            return None
        return min(self.gpus, key=lambda g: (-FINDING_RANK.get(g.mark or "", -1),
                                             g.util_pct if g.util_pct is not None else -1.0))


def unreachable_since(link: HostLink | None, telemetry: HostTelemetry | None, now_s: float,
                      now_mono_s: float) -> float | None:
    """Wall-clock time since which the host has not answered, or None while it answers: the
    earlier of the task polls' and the telemetry's word, the latter only while no task poll
    has answered since the telemetry began failing."""
    found: list[float] = []
    if link is not None and link.unreachable:
        found.append(link.bad_since_s if link.bad_since_s is not None else now_s)
    if telemetry is not None and not _poll_answered_since(link, telemetry, now_s, now_mono_s):
        since = telemetry.unreachable_since_wall(now_mono_s, now_s)
        if since is not None:
            found.append(since)
    return min(found) if found else None


def _poll_answered_since(link: HostLink | None, telemetry: HostTelemetry, now_s: float,
                         now_mono_s: float) -> bool:
    since = telemetry.unreachable_since_wall(now_mono_s, now_s)
    return (since is not None and link is not None and link.error is None
            and link.polled_at_s is not None and link.polled_at_s > since)


def not_answering(link: HostLink | None, telemetry: HostTelemetry | None, now_s: float,
                  now_mono_s: float) -> tuple[str, str] | None:
    """(words, level) while the host does not answer, else None: unreachable (by either
    witness, DOWN), or a task poll in flight for SLOW_POLL_S or more (STALE). The one source
    of "answering" for the Hosts pane and the Findings pane alike."""
    since = unreachable_since(link, telemetry, now_s, now_mono_s)
    if since is not None:
        return unreachable_words(since, now_s), DOWN
    if link is not None and link.in_flight_since_s is not None:
        waited = now_s - link.in_flight_since_s
        if waited >= SLOW_POLL_S:
            return f"not answering for {waited:.0f} s", STALE
    return None


def host_state(link: HostLink | None, telemetry: HostTelemetry | None, now_s: float,
               now_mono_s: float, telemetry_bad_since_s: float | None) -> tuple[str, str]:
    """(words, level) for one host. Not answering outranks everything; then task-poll
    trouble outranks telemetry trouble."""
    quiet = not_answering(link, telemetry, now_s, now_mono_s)
    if quiet is not None:
        return quiet
    if link is not None and link.error is not None:
        return f"error{_since(link.bad_since_s)}: {link.error}", WARN
    if telemetry is None:
        return "ok" if link is not None and link.polled_at_s is not None else "", OK
    state = telemetry.state(now_mono_s, DEFAULT_STALE_AFTER_S)
    if state is TelemetryState.ERROR and telemetry.unreachable:  # the polls answer again
        return "GPU telemetry reconnecting", STALE
    if state is TelemetryState.ERROR:
        return f"telemetry failing{_since(telemetry_bad_since_s)}: {telemetry.error}", WARN
    if state is TelemetryState.STALE:
        age = telemetry.staleness_s(now_mono_s)
        if age is None:
            return "waiting for telemetry", STALE
        return f"stale: last sample {age:.0f} s ago", STALE
    return "ok", OK


def _since(wall_s: float | None) -> str:
    return f" since {cells.clock_hms(wall_s)}" if wall_s is not None else ""


def build_host_lines(
    hosts: Sequence[Host],
    links: Mapping[str, HostLink],
    snapshots: Mapping[str, HostTelemetry] | None,
    history: GpuHistory | None,
    owner_of: OwnerOf,
    findings: Sequence[FindingLike],
    telemetry_bad_since: dict[str, float],
    now_s: float,
    now_mono_s: float,
) -> list[HostLine]:
    """One line per host. `telemetry_bad_since` (host → wall time its telemetry started
    failing) is updated in place, so "failing since" stays put across refreshes."""
    lines: list[HostLine] = []
    for host in hosts:
        tel = snapshots.get(host.name) if snapshots is not None else None
        link = links.get(host.name)
        if tel is not None and tel.error is not None:
            telemetry_bad_since.setdefault(host.name, now_s)
        else:
            telemetry_bad_since.pop(host.name, None)
        state, level = host_state(link, tel, now_s, now_mono_s,
                                  telemetry_bad_since.get(host.name))
        dim = level in (STALE, WARN, DOWN)
        since = unreachable_since(link, tel, now_s, now_mono_s)
        stale = None if since is None else f"stale since {cells.clock_hms(since)}"
        gpus = tuple(_gpu_line(host.name, g, history, owner_of, findings, dim, stale)
                     for g in (tel.gpus if tel is not None else ()))
        if snapshots is None:
            note = "telemetry not available"
        elif not host.gpus and not gpus:
            note = "CPU only"
        elif not gpus:
            note = f"{len(host.gpus)} GPUs: no sample yet"
        else:
            note = ""
        host_marks = [f.level for f in findings if f.host == host.name]
        lines.append(HostLine(host.name, host.address, len(gpus) or len(host.gpus), state, level,
                              gpus, note, _worst(host_marks)))
    return lines


def _gpu_line(host: str, gpu: GpuSample, history: GpuHistory | None, owner_of: OwnerOf,
              findings: Sequence[FindingLike], dim: bool, stale: str | None) -> GpuLine:
    """`stale` ("stale since T"): the host does not answer, so its owner is not asked."""
    spark: tuple[float | None, ...] = ()
    if history is not None:
        spark = history.series(host, gpu.uuid, "utilization_gpu_pct", last=SPARK_LEN)
    marks = [f.level for f in findings if f.host == host and f.gpu is not None
             and (f.gpu == gpu.index or f.gpu == gpu.uuid)]
    owner = stale if stale is not None else owner_of(host, gpu.uuid)
    return GpuLine(gpu.index, gpu.uuid, _short_name(gpu.name), gpu.utilization_gpu_pct,
                   gpu.memory_used_mib, gpu.memory_total_mib, gpu.temperature_c,
                   gpu.power_draw_w, spark, owner, _worst(marks), dim, stale is not None)


def _worst(levels: Sequence[str]) -> str | None:
    return max(levels, key=lambda x: FINDING_RANK.get(x, 0)) if levels else None


def _short_name(name: str | None) -> str:
    """'NVIDIA GeForce GTX 970' → 'GTX 970': vendor words carry nothing in a one-vendor lab."""
    if not name:
        return "GPU"
    for prefix in ("NVIDIA ", "GeForce ", "Tesla ", "Quadro "):
        if name.startswith(prefix):
            name = name[len(prefix):]
    return name
