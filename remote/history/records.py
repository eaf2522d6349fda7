"""What a run recorded about itself, read from its collected folders (remote/agent/record.py).

`collect` brings each host's run folder home as `runs/<id>/<host>/tfctl-run/`; `read_run` turns
those files into records with units in their names. The parse functions are pure (text in,
records out) and table-tested; only `read_run` touches the disk. A value nvidia-smi could not
give stays None, never 0.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tfctl.remote.agent.energy import energy_task_mask
from tfctl.remote.agent.energy import energy_why_unsampled as why_unsampled

RUN_FOLDER = "tfctl-run"


@dataclass(frozen=True)
class GpuTrack:
    """One GPU of one host over the run: a sample per second (times in seconds since epoch)."""

    host: str
    index: int
    name: str
    memory_total_mib: float | None
    t_s: tuple[float, ...]
    utilization_pct: tuple[float | None, ...]
    memory_used_mib: tuple[float | None, ...]
    temperature_c: tuple[float | None, ...]
    power_w: tuple[float | None, ...]
    throttle_mask: tuple[int | None, ...]


@dataclass(frozen=True)
class Speed:
    """A training task's speed over the run, as its log said it."""

    task: str
    host: str
    unit: str
    t_s: tuple[float, ...]
    value: tuple[float, ...]


@dataclass(frozen=True)
class Owner:
    host: str
    t_s: float
    index: int | None
    pid: int
    used_mib: float | None
    owner: str
    """A task of the run (`worker:0`), another run's (`run:<id>:<task>`), or `foreign:<user>`."""


@dataclass(frozen=True)
class Event:
    host: str
    t_s: float
    task: str | None
    kind: str  # start | restart | exit | stopped (by tfctl) | end
    exit_code: int | None = None
    signal: str | None = None
    cause: str | None = None


@dataclass
class RunRecording:
    """What one run recorded on its hosts, joined: GPU tracks, speeds, owners, events, and the
    tasks' masks and hosts (the wire's record of a run a host holds is `vocab.RunRecord`)."""

    run_id: str
    started_at: float | None = None
    finished_at: float | None = None
    finished: Mapping[str, Any] | None = None
    gpus: list[GpuTrack] = field(default_factory=list)
    speeds: list[Speed] = field(default_factory=list)
    owners: list[Owner] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    masks: dict[str, str] = field(default_factory=dict)
    """Task → its CUDA_VISIBLE_DEVICES, from the manifests."""
    gpu_lists: dict[str, list[tuple[int, str, str]]] = field(default_factory=dict)
    """Host → its GPUs as (index, uuid, name), from gpus.json, sampled or not."""
    task_hosts: dict[str, str] = field(default_factory=dict)
    log_tails: dict[str, list[str]] = field(default_factory=dict)
    unsampled: dict[str, str] = field(default_factory=dict)
    """Host → why it recorded no GPU sample: nothing may be said about its GPUs (`gpus` holds
    only GPUs with samples)."""

    def gpu_tasks_on(self, host: str) -> list[str]:
        """The tasks of `host` that were given GPUs (a non-empty CUDA_VISIBLE_DEVICES)."""
        return sorted(t for t, h in self.task_hosts.items()
                      if h == host and self.masks.get(t, "") not in ("", "-1"))

    @property
    def end_s(self) -> float | None:
        times = [e.t_s for e in self.events] + [t for g in self.gpus for t in g.t_s[-1:]]
        return self.finished_at or (max(times) if times else None)


def number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def mask_bits(text: str) -> int | None:
    try:
        return int(text, 16) if text.lower().startswith("0x") else int(text)
    except ValueError:
        return None


def parse_gpu_csv(text: str, host: str, gpus: Sequence[Mapping[str, Any]],
                  started_at: float) -> list[GpuTrack]:
    """`t,index,util,mem,temp,power,throttle` lines → one track per GPU listed in gpus.json."""
    rows: dict[int, list[list[str]]] = {}
    for line in text.splitlines():
        parts = line.split(",")
        if len(parts) == 7 and parts[1].isdigit():
            rows.setdefault(int(parts[1]), []).append(parts)
    tracks = []
    for gpu in gpus:
        index = int(gpu["index"])
        mine = rows.get(index, [])
        tracks.append(GpuTrack(
            host=host, index=index, name=str(gpu.get("name", "")),
            memory_total_mib=number(str(gpu.get("memory_total_mib", ""))),
            t_s=tuple(started_at + float(r[0]) for r in mine),
            utilization_pct=tuple(number(r[2]) for r in mine),
            memory_used_mib=tuple(number(r[3]) for r in mine),
            temperature_c=tuple(number(r[4]) for r in mine),
            power_w=tuple(number(r[5]) for r in mine),
            throttle_mask=tuple(mask_bits(r[6]) for r in mine)))
    return tracks


def parse_throughput(text: str, host: str, started_at: float) -> list[Speed]:
    series: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for line in text.splitlines():
        parts = line.split(",")
        if len(parts) == 4 and (value := number(parts[2])) is not None:
            series.setdefault((parts[1], parts[3]), []).append(
                (started_at + float(parts[0]), value))
    return [Speed(task, host, unit, tuple(t for t, _ in points), tuple(v for _, v in points))
            for (task, unit), points in sorted(series.items())]


def parse_owners(text: str, host: str, started_at: float) -> list[Owner]:
    owners = []
    for line in text.splitlines():
        parts = line.split(",", 4)
        if len(parts) == 5 and parts[2].isdigit():
            owners.append(Owner(host, started_at + float(parts[0]),
                                int(parts[1]) if parts[1].isdigit() else None, int(parts[2]),
                                number(parts[3]), parts[4]))
    return owners


def parse_events(text: str, host: str) -> list[Event]:
    events = []
    for line in text.splitlines():
        try:
            raw = json.loads(line)
        except ValueError:
            continue
        if isinstance(raw, dict) and raw.get("t") is not None:
            events.append(Event(host, float(raw["t"]), raw.get("task"), str(raw.get("event")),
                                raw.get("exit_code"), raw.get("signal"), raw.get("cause")))
    return events


def read_run(root: str, run_id: str) -> RunRecording:
    """Every host folder under `root` (= runs/<id>), joined into one record."""
    record = RunRecording(run_id)
    for host in sorted(os.listdir(root)):
        folder = os.path.join(root, host, RUN_FOLDER)
        if os.path.isdir(folder):
            _read_host(record, host, folder)
    record.events.sort(key=lambda e: e.t_s)
    return record


def _read_host(record: RunRecording, host: str, folder: str) -> None:
    def text(name: str) -> str:
        try:
            with open(os.path.join(folder, name), encoding="utf-8", errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    manifest = json.loads(text("manifest.json") or "{}")
    created = manifest.get("created_at")
    if created is not None:
        record.started_at = min(record.started_at or created, created)
    for task in manifest.get("tasks", []):
        record.masks[task["name"]] = energy_task_mask(task)
        record.task_hosts[task["name"]] = host
        tail = text(f"{task['name'].replace(':', '-')}.log").splitlines()[-40:]
        record.log_tails[task["name"]] = tail
    finished = json.loads(text("finished.json") or "null")
    if finished:
        record.finished = record.finished or finished
        at = finished.get("finished_at")
        record.finished_at = max(record.finished_at or at, at) if at else record.finished_at
    info_text = text("gpus.json")
    info = json.loads(info_text or "{}")
    start = float(info.get("started_at") or created or 0)
    tracks = parse_gpu_csv(text("gpu.csv"), host, info.get("gpus", []), start)
    record.gpu_lists[host] = [(int(g["index"]), str(g.get("uuid") or ""), str(g.get("name") or ""))
                              for g in info.get("gpus", []) if str(g.get("index", "")).isdigit()]
    record.gpus += [t for t in tracks if t.t_s]
    if not any(t.t_s for t in tracks):
        record.unsampled[host] = why_unsampled(info, bool(info_text))
    record.speeds += parse_throughput(text("throughput.csv"), host, start)
    record.owners += parse_owners(text("owners.csv"), host, start)
    record.events += parse_events(text("events.jsonl"), host)
