"""Pure text for the dashboard's cells: bars, sparklines, units, durations, speeds, owners.

No textual import: these are table-tested on their own, and the widgets only place their output.
Every formatter takes `None` as "not available" and says "n/a" (or "–"), never 0.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence

from tfctl.remote.agent.speed import EXAMPLES_PER_S, STEPS_PER_S
from tfctl.remote.gpus.lastseen import HostTelemetry

NA = "n/a"
DASH = "–"
_EIGHTHS = " ▏▎▍▌▋▊▉"
_SPARK = "▁▂▃▄▅▆▇█"

def bar(fraction: float | None, width: int) -> str:
    """A left-aligned block bar of exactly `width` cells, in eighths; blank when unknown."""
    if width <= 0:
        return ""
    if fraction is None:
        return " " * width
    eighths = round(max(0.0, min(1.0, fraction)) * width * 8)
    full, rest = divmod(eighths, 8)
    text = "█" * full + (_EIGHTHS[rest] if rest else "")
    if not text and fraction > 0:
        text = "▏"
    return text.ljust(width)[:width]


def sparkline(values: Sequence[float | None], width: int, top: float = 100.0) -> str:
    """The last `width` values as block heights (0..top); gaps are blanks; left-padded."""
    if width <= 0:
        return ""
    chars: list[str] = []
    for value in values[-width:]:
        if value is None:
            chars.append(" ")
            continue
        level = round(max(0.0, min(1.0, value / top)) * (len(_SPARK) - 1))
        chars.append(_SPARK[level])
    return "".join(chars).rjust(width)


def pct(value: float | None) -> str:
    return f"{value:3.0f}%" if value is not None else f"{NA:>4}"


def mem_gib(used_mib: float | None, total_mib: float | None) -> str:
    """'11.2/12.0G' — GiB with one decimal so 4 GB and 12 GB cards line up."""
    used = "?" if used_mib is None else f"{used_mib / 1024:.1f}"
    total = "?" if total_mib is None else f"{total_mib / 1024:.1f}"
    return f"{used}/{total}G"


def mem_fraction(used_mib: float | None, total_mib: float | None) -> float | None:
    if used_mib is None or not total_mib:
        return None
    return used_mib / total_mib


def temp_c(value: float | None) -> str:
    return f"{value:.0f}°C" if value is not None else NA


def power_w(value: float | None) -> str:
    """Watts; "n/a" where the card has no power sensor (old GeForce) — never "0W"."""
    return f"{value:.0f}W" if value is not None else NA


def duration(seconds: float | None) -> str:
    """'12:41' under an hour, '1:02:41' above, '3d 04:00' above a day; '–' when unknown."""
    if seconds is None:
        return DASH
    total = max(0, int(seconds))
    days, rest = divmod(total, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d {hours:02d}:{minutes:02d}"
    if hours:
        return f"{hours}:{minutes:02d}:{secs:02d}"
    return f"{minutes:02d}:{secs:02d}"


def clock_hms(wall_s: float) -> str:
    """Local wall-clock time of day, as a person compares it with their own watch."""
    return time.strftime("%H:%M:%S", time.localtime(wall_s))


def rate(value: float | None, unit: str = STEPS_PER_S) -> str:
    """A training speed for the steps/s column (`tfctl.remote.agent.speed` reads it from the
    logs); a speed the log gives only in examples/s is marked `ex`; "–" when unknown."""
    if value is None:
        return DASH
    if unit == EXAMPLES_PER_S:
        return f"{value:.0f}ex" if value < 1e5 else f"{value / 1000:.0f}kex"
    return f"{value:.1f}" if value < 1000 else f"{value:.0f}"


def owner_label(telemetry: HostTelemetry, gpu_uuid: str, pid_tasks: Mapping[int, str],
                known: bool = True) -> str:
    """Who holds a GPU, from its compute processes: our task names, else a foreign pid, else idle.

    `pid_tasks` maps process ids on this host to our task names (from the run's task status).
    Why not the mask alone: a mask says where a task *should* run; the processes say who *is*
    on the GPU, which is what catches another user's job or a task that never reached its GPU.
    `known=False` (the host's tasks not read yet) says "pid N", not "foreign": we cannot tell."""
    processes = telemetry.processes_on(gpu_uuid)
    ours = sorted({pid_tasks[p.pid] for p in processes if p.pid in pid_tasks})
    if ours:
        return ",".join(ours)
    if processes:
        first = processes[0]
        name = f" {first.process_name.rsplit('/', 1)[-1]}" if first.process_name else ""
        more = f" +{len(processes) - 1}" if len(processes) > 1 else ""
        return f"{'foreign ' if known else ''}pid {first.pid}{name}{more}"
    return "idle"


def ellipsize(text: str, width: int) -> str:
    if width <= 0:
        return ""
    return text if len(text) <= width else text[: max(0, width - 1)] + "…"
