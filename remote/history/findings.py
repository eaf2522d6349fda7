"""What a recorded run shows, in words: the answers a lab asks the morning after. Pure.

- a GPU idle while its peers worked (the TITAN X ×4 story: a `per_host` worker of
  between-graph code keeps GPU 0 busy and leaves 1–3 idle);
- a straggler: a worker much slower than the median of its peers;
- a task that died, named by its own error line (out of memory among them), with the hint;
- thermal or power throttling in a good share of a GPU's samples;
- a foreign process (not ours) on one of our GPUs;
- a host that recorded no GPU sample, and why: nothing else here is said about its GPUs;
and the summary: duration, how it ended, mean speed per worker, GPU-hours busy and idle (None
where no GPU sample was recorded at all, never 0).
Thresholds are here, where they can be read and table-tested.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from tfctl.remote.history.records import GpuTrack, RunRecording
from tfctl.remote.runs.failure import explain

IDLE_PCT = 10.0
BUSY_PCT = 50.0
STRAGGLER_RATIO = 0.6
THROTTLED_SHARE = 0.1
# NVML clocks event reasons: SW power cap 0x4, HW slowdown 0x8, SW/HW thermal 0x20/0x40,
# HW power brake 0x80.
THERMAL_BITS = 0x8 | 0x20 | 0x40
POWER_BITS = 0x4 | 0x80


@dataclass(frozen=True)
class RunFinding:
    """What a recorded run shows, in a sentence (`tfctl report`)."""

    level: str  # "warn" | "fail" | "info"
    text: str


@dataclass(frozen=True)
class Summary:
    duration_s: float | None
    ended: str
    mean_speed: dict[str, float]
    """Task → mean steps/s (or examples/s) over the run."""
    gpu_hours_busy: float | None
    gpu_hours_idle: float | None
    """None when no host recorded a GPU sample; otherwise over the hosts that did."""
    unsampled: dict[str, str]
    """Host → why it recorded no GPU sample (left out of the GPU-hours)."""


def mean_util(track: GpuTrack) -> float | None:
    values = [v for v in track.utilization_pct if v is not None]
    return statistics.fmean(values) if values else None


def idle_gpus(gpus: Sequence[GpuTrack]) -> list[RunFinding]:
    """GPUs that stayed idle while another GPU of the run worked."""
    means = {(g.host, g.index): mean_util(g) for g in gpus}
    busy = {key: m for key, m in means.items() if m is not None and m >= BUSY_PCT}
    if not busy:
        return []
    findings = []
    for host in sorted({g.host for g in gpus}):
        idle = sorted(i for (h, i), m in means.items() if h == host and m is not None
                      and m < IDLE_PCT)
        if not idle:
            continue
        workers = sorted((i, m) for (h, i), m in busy.items() if h == host) or \
            sorted((i, m) for (_, i), m in busy.items())
        peers = ", ".join(f"GPU {i} ({m:.0f}%)" for i, m in workers)
        which = ", ".join(str(i) for i in idle)
        findings.append(RunFinding("warn", f"{host} GPU {which} idle (under {IDLE_PCT:.0f}% on "
                                        f"average) while {peers} worked"))
    return findings


def stragglers(speeds: dict[str, float]) -> list[RunFinding]:
    findings = []
    for task, value in sorted(speeds.items()):
        others = [v for t, v in speeds.items() if t != task]
        if len(others) < 1 or not value:
            continue
        median = statistics.median(others)
        if value < STRAGGLER_RATIO * median:
            findings.append(RunFinding("warn", f"{task} is {median / value:.1f}× slower than its "
                                            f"peers ({value:.1f} vs {median:.1f} per second)"))
    return findings


def failures(record: RunRecording) -> list[RunFinding]:
    findings = []
    for event in record.events:
        if event.kind != "exit" or (event.exit_code in (0, None) and not event.signal):
            continue
        how = f"killed by {event.signal}" if event.signal else f"exited {event.exit_code}"
        failure = explain(record.log_tails.get(event.task or "", []))
        text = f"{event.task} on {event.host} {how}"
        if failure.headline:
            text += f": {failure.headline}"
        if failure.hint:
            text += f" — {failure.hint}"
        findings.append(RunFinding("fail", text))
    return findings


def throttling(gpus: Sequence[GpuTrack]) -> list[RunFinding]:
    findings = []
    for g in gpus:
        masks = [m for m in g.throttle_mask if m is not None]
        if not masks:
            continue
        for bits, what in ((THERMAL_BITS, "heat"), (POWER_BITS, "power")):
            share = sum(1 for m in masks if m & bits) / len(masks)
            if share >= THROTTLED_SHARE:
                findings.append(RunFinding("warn", f"{g.host} GPU {g.index} was slowed for {what} "
                                                f"in {share:.0%} of its samples"))
    return findings


def foreign(record: RunRecording) -> list[RunFinding]:
    seen: dict[tuple[str, int | None, int], str] = {}
    for owner in record.owners:
        if owner.owner.startswith("foreign:"):
            seen.setdefault((owner.host, owner.index, owner.pid), owner.owner.split(":", 1)[1])
    return [RunFinding("warn", f"a foreign process (pid {pid}, user {user}) used {host} GPU "
                            f"{index} during the run")
            for (host, index, pid), user in sorted(seen.items(), key=str)]


def mean_speeds(record: RunRecording) -> dict[str, float]:
    return {s.task: statistics.fmean(s.value) for s in record.speeds if s.value}


def summarize(record: RunRecording) -> Summary:
    start, end = record.started_at, record.end_s
    busy = idle = 0.0
    for g in record.gpus:
        for util in g.utilization_pct:
            if util is None:
                continue
            if util >= IDLE_PCT:
                busy += 1
            else:
                idle += 1
    status = (record.finished or {}).get("status") or {}
    code, cause = status.get("exit_code"), status.get("cause")
    ended = "still running" if record.finished is None else (
        f"exit {code}" if code is not None else "finished") + (f" ({cause})" if cause else "")
    sampled = bool(busy or idle)
    return Summary(None if start is None or end is None else max(0.0, end - start), ended,
                   mean_speeds(record), busy / 3600 if sampled else None,
                   idle / 3600 if sampled else None, dict(record.unsampled))


def unsampled_gpus(record: RunRecording) -> list[RunFinding]:
    """A host without GPU samples, said as such: a warning where tasks were given its GPUs."""
    findings = []
    for host, why in sorted(record.unsampled.items()):
        tasks = record.gpu_tasks_on(host)
        given = f"; {', '.join(tasks)} had GPUs there" if tasks else ""
        findings.append(RunFinding("warn" if tasks else "info",
                                f"no GPU samples were recorded on {host} (why: {why}){given}: "
                                "nothing is said about its GPUs"))
    return findings


def all_findings(record: RunRecording) -> list[RunFinding]:
    return (failures(record) + unsampled_gpus(record) + idle_gpus(record.gpus)
            + stragglers(mean_speeds(record)) + throttling(record.gpus) + foreign(record))
