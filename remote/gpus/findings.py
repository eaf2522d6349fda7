"""Findings: what a person should look at, computed from GPU samples and task states. Pure.

The rules live here, not in the UI, so that `tfctl gpus`, the dashboard and tests agree on what
"idle while its peers are busy" means; their thresholds are `FindingRules` parameters. How a
finding is drawn (colour, icon, order on screen) is the UI's business.

Time is passed in (`now`, monotonic seconds as in `GpuHistory`); a log's progress is tracked across
polls with `track_logs`, which returns new marks instead of mutating old ones.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from statistics import fmean
from typing import Any

from tfctl.remote.gpus.lastseen import (
    DEFAULT_STALE_AFTER_S,
    GpuHistory,
    HostTelemetry,
    TelemetryState,
)
from tfctl.remote.gpus.nvsmi import GpuSample, throttle_reason_names
from tfctl.remote.gpus.owners import (
    MaskMiss,
    TaskProcesses,
    gpus_in_mask,
    masked_gpus_without_process,
    masks_by_host,
    pids_by_host,
)
from tfctl.remote.lab.idle import idle_words
from tfctl.remote.silence import Silence

WARNING, ERROR = "warning", "error"  # the dashboard's FindingLevel spellings
ENDED_STATES = ("exited", "killed", "stopped", "lost")
_HARDWARE_THROTTLE = ("hw_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown")


class FindingKind(str, Enum):
    """Which rule found it: a front end that says the same in its own words leaves the finding
    out (`tfctl gpus` says an unreachable host on its own line)."""

    IDLE_GPU = "idle_gpu"
    LOG_STALLED = "log_stalled"
    MEMORY_AFTER_DOWN = "memory_after_down"
    THROTTLING = "throttling"
    STREAM_STALE = "stream_stale"
    STREAM_ERROR = "stream_error"
    STREAM_UNREACHABLE = "stream_unreachable"
    MASK_UNUSED = "mask_unused"
    FOREIGN_PROCESS = "foreign_process"
    CHIEF_SILENT = "chief_silent"
    POLICY_IDLE = "policy_idle"


@dataclass(frozen=True)
class Finding:
    """One observation. Satisfies `tfctl.tui.app.sources.FindingLike` (`gpu` is the index)."""

    level: str  # "warning" | "error"
    host: str | None
    gpu_index: int | None
    task: str | None
    text: str
    kind: FindingKind | None = None

    @property
    def gpu(self) -> int | None:
        return self.gpu_index


@dataclass(frozen=True)
class FindingRules:
    busy_util_pct: float = 50.0  # mean utilization at or above: busy
    idle_util_pct: float = 10.0  # mean utilization at or below: idle
    window_s: float = 30.0  # utilization is averaged over this much recent history
    min_samples: int = 3  # fewer samples in the window: not judged (just started, or stale)
    log_stall_s: float = 300.0  # a running worker's log unchanged this long
    log_stall_types: frozenset[str] = frozenset({"worker", "chief"})
    stale_after_s: float = DEFAULT_STALE_AFTER_S
    mask_grace_s: float = 60.0  # TF may take this long to open its GPU after start
    benign_throttle: frozenset[str] = frozenset({"gpu_idle"})


DEFAULT_RULES = FindingRules()


@dataclass(frozen=True)
class LogMark:
    """The last log state seen for one task and when it last changed."""

    size_bytes: int | None
    last_line: str
    changed_at_s: float


LogKey = tuple[str, str]  # (host, task name)


def track_logs(previous: Mapping[LogKey, LogMark], tasks: Iterable[TaskProcesses],
               now: float) -> dict[LogKey, LogMark]:
    """New marks: a task whose log size (or, without a size, last line) changed gets `now`."""
    marks: dict[LogKey, LogMark] = {}
    for task in tasks:
        key = (task.host, task.name)
        old = previous.get(key)
        same = old is not None and (
            old.size_bytes == task.log_size_bytes if task.log_size_bytes is not None
            else old.last_line == task.last_line)
        changed_at = old.changed_at_s if same and old is not None else now
        marks[key] = LogMark(task.log_size_bytes, task.last_line, changed_at)
    return marks


def _mean_util(history: GpuHistory, host: str, uuid: str, now: float,
               rules: FindingRules) -> float | None:
    values = [t.sample.utilization_gpu_pct for t in history.recent(host, uuid)
              if t.at_s >= now - rules.window_s and t.sample.utilization_gpu_pct is not None]
    return fmean(values) if len(values) >= rules.min_samples else None


def _gpu_name(gpu: GpuSample | None, uuid: str) -> str:
    return f"GPU {gpu.index}" if gpu is not None and gpu.index is not None else uuid


def idle_gpu_findings(snapshots: Mapping[str, HostTelemetry], history: GpuHistory,
                      tasks: Sequence[TaskProcesses], now: float,
                      rules: FindingRules = DEFAULT_RULES) -> list[Finding]:
    """The seed case: a GPU the run's masks name sits idle while another such GPU is busy."""
    planned: dict[tuple[str, str], tuple[GpuSample, list[TaskProcesses]]] = {}
    for task in tasks:
        snap = snapshots.get(task.host)
        if snap is None or not task.mask:
            continue
        for gpu in gpus_in_mask(task.mask, snap.gpus):
            planned.setdefault((task.host, gpu.uuid), (gpu, []))[1].append(task)
    utils = {key: _mean_util(history, key[0], key[1], now, rules) for key in planned}
    busy = [key for key, u in utils.items() if u is not None and u >= rules.busy_util_pct]
    if not busy:
        return []
    found = []
    for key, util in utils.items():
        if util is None or util > rules.idle_util_pct:
            continue
        gpu, owners = planned[key]
        why = ", ".join(f"{t.name} {t.state}" for t in owners)
        found.append(Finding(
            WARNING, key[0], gpu.index, owners[0].name if len(owners) == 1 else None,
            f"{key[0]} {_gpu_name(gpu, key[1])} idle ({util:.0f} %) while {len(busy)} of the "
            f"run's GPUs are busy: {why}", FindingKind.IDLE_GPU))
    return found


def stalled_log_findings(tasks: Sequence[TaskProcesses], marks: Mapping[LogKey, LogMark],
                         now: float, rules: FindingRules = DEFAULT_RULES) -> list[Finding]:
    """Running workers (and the chief) whose log has not grown for `log_stall_s`."""
    found = []
    for task in tasks:
        mark = marks.get((task.host, task.name))
        if task.state != "running" or task.type not in rules.log_stall_types or mark is None:
            continue
        quiet_s = now - mark.changed_at_s
        if quiet_s >= rules.log_stall_s:
            tail = f" (last line: {task.last_line[-80:]})" if task.last_line else ""
            found.append(Finding(WARNING, task.host, None, task.name,
                                 f"{task.name}'s log has not advanced for {quiet_s:.0f} s{tail}",
                                 FindingKind.LOG_STALLED))
    return found


def memory_after_down_findings(snapshots: Mapping[str, HostTelemetry],
                               tasks: Sequence[TaskProcesses]) -> list[Finding]:
    """Ended tasks (stopped by `down`, exited, killed) whose processes still hold a GPU."""
    found = []
    for task in tasks:
        snap = snapshots.get(task.host)
        if task.state not in ENDED_STATES or snap is None or not task.pids:
            continue
        for proc in snap.processes:
            if proc.pid not in task.pids:
                continue
            gpu = next((g for g in snap.gpus if g.uuid == proc.gpu_uuid), None)
            memory = f"{proc.used_memory_mib:.0f} MiB" if proc.used_memory_mib is not None \
                else "memory"
            found.append(Finding(
                ERROR, task.host, gpu.index if gpu else None, task.name,
                f"{task.name} is {task.state} but pid {proc.pid} still holds {memory} on "
                f"{task.host} {_gpu_name(gpu, proc.gpu_uuid)}", FindingKind.MEMORY_AFTER_DOWN))
    return found


def throttle_findings(snapshots: Mapping[str, HostTelemetry],
                      rules: FindingRules = DEFAULT_RULES) -> list[Finding]:
    """GPUs slowed for a reason other than being idle; hardware slowdowns are errors."""
    found = []
    for host, snap in snapshots.items():
        for gpu in snap.gpus:
            reasons = [r for r in throttle_reason_names(gpu.throttle_reasons)
                       if r not in rules.benign_throttle]
            if reasons:
                level = ERROR if any(r in _HARDWARE_THROTTLE for r in reasons) else WARNING
                found.append(Finding(level, host, gpu.index, None,
                                     f"{host} {_gpu_name(gpu, gpu.uuid)} throttled: "
                                     f"{', '.join(reasons)}", FindingKind.THROTTLING))
    return found


def stream_findings(snapshots: Mapping[str, HostTelemetry], now: float,
                    rules: FindingRules = DEFAULT_RULES) -> list[Finding]:
    """Hosts whose telemetry failed, or that sent nothing for longer than `stale_after_s`."""
    found = []
    for host, snap in snapshots.items():
        state = snap.state(now, rules.stale_after_s)
        since = snap.unreachable_since()
        if since is not None:  # the host, not nvidia-smi: its error would only quote a command
            found.append(Finding(ERROR, host, None, None, f"{host} unreachable (no answer for "
                                 f"{max(0.0, now - since):.0f} s): its GPUs and tasks are shown "
                                 "as last seen", FindingKind.STREAM_UNREACHABLE))
        elif state is TelemetryState.ERROR:
            found.append(Finding(ERROR, host, None, None, f"{host} GPU telemetry: {snap.error}",
                                 FindingKind.STREAM_ERROR))
        elif state is TelemetryState.STALE and snap.last_sample_at is not None:
            age = snap.staleness_s(now) or 0.0
            found.append(Finding(WARNING, host, None, None, f"{host}: no GPU sample for "
                                 f"{age:.0f} s", FindingKind.STREAM_STALE))
    return found


def silence_findings(silences: Iterable[Silence], wall_now_s: float) -> list[Finding]:
    """Hosts whose run watcher cannot reach the chief's port (silence, not a refusal): their
    tasks keep running, up to the job's silence window (`tfctl.remote.silence`)."""
    return [Finding(WARNING, s.host, None, None, s.words(wall_now_s), FindingKind.CHIEF_SILENT)
            for s in silences]


def policy_idle_findings(idle: Mapping[str, Mapping[str, Any]], wall_now_s: float
                         ) -> list[Finding]:
    """Hosts where the lab's policy has warned the run idle: it stops there at `stop_at` unless
    its GPUs are used again (docs/policy.md)."""
    return [Finding(WARNING, host, None, None, idle_words(host, state, wall_now_s),
                    FindingKind.POLICY_IDLE) for host, state in sorted(idle.items())]


def mask_findings(misses: Iterable[MaskMiss], tasks: Sequence[TaskProcesses],
                  rules: FindingRules = DEFAULT_RULES) -> list[Finding]:
    """Running tasks, past their start-up grace, absent from a GPU their mask names."""
    by_key = {(t.host, t.name): t for t in tasks}
    found = []
    for miss in misses:
        task = by_key.get((miss.host, miss.task))
        if task is None or task.state != "running" or (task.uptime_s or 0.0) < rules.mask_grace_s:
            continue
        gpu = f"GPU {miss.gpu_index}" if miss.gpu_index is not None else miss.gpu_uuid
        found.append(Finding(WARNING, miss.host, miss.gpu_index, miss.task,
                             f"{miss.task}'s mask {miss.mask!r} names {miss.host} {gpu}, but "
                             "none of its processes is on it", FindingKind.MASK_UNUSED))
    return found


def foreign_findings(snapshots: Mapping[str, HostTelemetry],
                     tasks: Sequence[TaskProcesses]) -> list[Finding]:
    """Processes of no task of ours on a GPU that a running task's mask names."""
    pids = pids_by_host(tasks)
    found = []
    for task in tasks:
        snap = snapshots.get(task.host)
        if snap is None or task.state not in ("running", "starting"):
            continue
        for gpu in gpus_in_mask(task.mask, snap.gpus):
            for proc in snap.processes_on(gpu.uuid):
                if proc.pid not in pids.get(task.host, {}):
                    found.append(Finding(
                        WARNING, task.host, gpu.index, task.name,
                        f"{task.host} {_gpu_name(gpu, gpu.uuid)} ({task.name}'s) is shared with "
                        f"foreign pid {proc.pid}", FindingKind.FOREIGN_PROCESS))
    return found


def all_findings(snapshots: Mapping[str, HostTelemetry], history: GpuHistory,
                 tasks: Sequence[TaskProcesses], marks: Mapping[LogKey, LogMark], now: float,
                 rules: FindingRules = DEFAULT_RULES) -> tuple[Finding, ...]:
    """Every rule above, errors first, each finding once."""
    misses = masked_gpus_without_process(snapshots, pids_by_host(tasks), masks_by_host(tasks))
    found = [*stream_findings(snapshots, now, rules),
             *memory_after_down_findings(snapshots, tasks),
             *idle_gpu_findings(snapshots, history, tasks, now, rules),
             *mask_findings(misses, tasks, rules),
             *foreign_findings(snapshots, tasks),
             *stalled_log_findings(tasks, marks, now, rules),
             *throttle_findings(snapshots, rules)]
    unique = list(dict.fromkeys(found))
    return tuple(sorted(unique, key=lambda f: f.level != ERROR))
