"""The report's figures, one PNG each: per host its GPUs' utilization and memory, the workers'
speed, and the tasks' timeline. Colours and sizes live here, nowhere else."""

from __future__ import annotations

import io
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from tfctl.remote.history.records import Event, GpuTrack, RunRecording, Speed

DPI = 100


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")  # no display: files only
    import matplotlib.pyplot as plt

    return plt


def _times(values: Sequence[float]) -> list[datetime]:
    return [datetime.fromtimestamp(t) for t in values]


def _png(fig: Any) -> bytes:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=DPI, bbox_inches="tight")
    _pyplot().close(fig)
    return buffer.getvalue()


def gpu_figure(host: str, tracks: Sequence[GpuTrack]) -> bytes:
    plt = _pyplot()
    fig, (util, memory) = plt.subplots(2, 1, figsize=(10, 5), sharex=True)
    for track in tracks:
        label = f"GPU {track.index} {track.name}".strip()
        times = _times(track.t_s)
        util.plot(times, [v if v is not None else float("nan") for v in track.utilization_pct],
                  label=label, linewidth=1.2)
        memory.plot(times, [v if v is not None else float("nan")
                            for v in track.memory_used_mib], label=label, linewidth=1.2)
    util.set_ylabel("utilization %")
    util.set_ylim(-2, 102)
    util.set_title(f"{host}: GPUs over the run")
    memory.set_ylabel("memory used, MiB")
    util.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small")
    fig.autofmt_xdate()
    return _png(fig)


def speed_figure(speeds: Sequence[Speed]) -> bytes:
    plt = _pyplot()
    fig, axis = plt.subplots(figsize=(10, 3.5))
    for speed in speeds:
        axis.plot(_times(speed.t_s), speed.value, marker=".", linewidth=1.2,
                  label=f"{speed.task} ({speed.host})")
    unit = speeds[0].unit if speeds else "steps/s"
    axis.set_ylabel(unit)
    axis.set_title("training speed per worker")
    axis.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small")
    fig.autofmt_xdate()
    return _png(fig)


def timeline_figure(record: RunRecording) -> bytes:
    plt = _pyplot()
    tasks = sorted({e.task for e in record.events if e.task},
                   key=lambda n: (n.split(":")[0] != "ps", n))
    fig, axis = plt.subplots(figsize=(10, 0.45 * max(len(tasks), 2) + 1.2))
    end = record.end_s or 0.0
    for row, task in enumerate(tasks):
        mine = [e for e in record.events if e.task == task]
        _task_bar(axis, row, mine, end)
    for event in record.events:
        if event.kind == "end":
            axis.axvline(datetime.fromtimestamp(event.t_s), color="black", linestyle="--",
                         linewidth=1)
    axis.set_yticks(range(len(tasks)), tasks)
    axis.invert_yaxis()
    axis.set_title("tasks: running (bars), restarts (orange), failures (red), "
                   "the job's end (dashed)")
    fig.autofmt_xdate()
    return _png(fig)


def _task_bar(axis: Any, row: int, events: Sequence[Event], end: float) -> None:
    start = next((e.t_s for e in events if e.kind in ("start", "restart")), None)
    stop = next((e.t_s for e in events if e.kind in ("exit", "stopped")), end)
    if start is not None:
        axis.plot([datetime.fromtimestamp(start), datetime.fromtimestamp(stop)], [row, row],
                  linewidth=8, solid_capstyle="butt", color="tab:blue")
    for event in events:
        failed = event.kind == "exit" and (event.signal or event.exit_code not in (0, None))
        if event.kind == "restart" or failed:
            axis.plot([datetime.fromtimestamp(event.t_s)], [row], marker="o", markersize=7,
                      color="tab:orange" if event.kind == "restart" else "tab:red")
