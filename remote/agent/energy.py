"""What a run's GPUs cost: the hours the run held each GPU, and the energy each drew meanwhile.

Part of the agent program (`__init__.py`): stdlib only, Python >= 3.8. The agent files are
joined into one module on the hosts, so every top-level name here carries `energy`/`ENERGY`.
The functions above `energy_of_run` are pure and shared: the host answers `tfctl runs` with
them from its own records (op `runs` with `energy`), and the client's report
(`tfctl.remote.history.cost`) calls the same ones on the records `collect` brought home, so the
two cannot disagree.

- **Held.** A task holds the GPUs its CUDA_VISIBLE_DEVICES names (indices, which tfctl's tasks
  read in PCI order like nvidia-smi, or UUIDs) from its first start to its last exit, restarts
  in between included (the run keeps the GPU through a restart's backoff). A GPU's hold is the
  union over the run's tasks; its GPU-hours are that hold's length. Whatever the framework: any
  task of a run with a mask counts.
- **Energy.** The recorder's `power.draw` samples (gpu.csv, one a second, whole seconds since
  the recording began) integrated over the hold with the trapezoid rule. Between two power
  readings at most `ENERGY_MAX_GAP_S` apart the power is taken as linear; from an edge of the
  hold to a reading within `ENERGY_MAX_GAP_S` of it, as flat. A longer stretch without a
  reading (the recorder stopped for a full disk, nvidia-smi hung, samples said `[N/A]`) is not
  bridged: its seconds are `unsampled_s`, and the energy is a lower bound. A GPU whose samples
  carry no power at all (older GeForce: `[Not Supported]`) has no energy: None, with
  `power not reported`, never 0; so has a GPU with no reading during its hold.
- **Shared boards.** nvidia-smi measures the whole board: the energy is the run's own only where
  it had the GPU to itself. `shared_with` names the other owners (owners.csv: another run's
  task, `foreign:<user>`) seen on the GPU while the run held it.

NVML's total-energy counter (`nvmlDeviceGetTotalEnergyConsumption`, mJ since the driver
loaded, Volta and newer) would give the energy without sampling, but nvidia-smi has no query
field for it and it is not read here: the samples work on every card that reports power.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from tfctl.remote.agent.claims import mask_gpus
from tfctl.remote.agent.jsonfile import read_json, write_json
from tfctl.remote.agent.vocab import GpuCost

ENERGY_MAX_GAP_S = 5.0
"""The longest stretch between two power readings that is bridged (five sample periods)."""
ENERGY_FILE = "energy.json"
"""The run folder's costs as last computed, kept while the records it was computed from stay
unchanged (a run's are computed once after it ended)."""
ENERGY_VERSION = 1
"""Of the way `ENERGY_FILE` was computed: a file of another version is computed again."""
ENERGY_SOURCES = ("manifest.json", "gpus.json", "gpu.csv", "events.jsonl", "owners.csv")
ENERGY_NO_POWER = "power not reported"


def energy_task_mask(task: Mapping[str, Any]) -> str:
    """A manifest task's CUDA_VISIBLE_DEVICES: its env's where it sets one, else its mask."""
    env = task.get("env") or {}
    return str(env.get("CUDA_VISIBLE_DEVICES", task.get("cuda_visible_devices")) or "")


def energy_mask_indices(mask: str, gpus: Sequence[tuple[int, str]]) -> list[int]:
    """The nvidia-smi indices a mask names, given the host's GPUs as (index, uuid); a UUID (or
    a unique prefix of one, as CUDA takes) is looked up, a MIG instance is left out."""
    found: list[int] = []
    for token in mask_gpus(mask):
        if isinstance(token, int):
            index: int | None = token if not gpus or any(i == token for i, _ in gpus) else None
        else:
            matches = [i for i, uuid in gpus if uuid and uuid.startswith(token)]
            index = matches[0] if len(matches) == 1 else None
        if index is not None and index not in found:
            found.append(index)
    return found


def energy_task_spans(events: Iterable[tuple[str, str, float]],
                      end_s: float) -> dict[str, tuple[float, float]]:
    """Task → (its first start, its last exit) from `(task, kind, t)` events (events.jsonl's
    start, restart, exit, stopped); a task still running at its last event ends at `end_s`."""
    first: dict[str, float] = {}
    last: dict[str, float | None] = {}
    for task, kind, t in sorted(events, key=lambda e: e[2]):
        if kind in ("start", "restart"):
            first.setdefault(task, t)
            last[task] = None
        elif kind in ("exit", "stopped") and task in first:
            last[task] = t
    spans = {}
    for task, start in first.items():
        stop = last.get(task)
        spans[task] = (start, max(start, end_s if stop is None else stop))
    return spans


def energy_union(spans: Iterable[tuple[float, float]]) -> list[tuple[float, float]]:
    """Spans joined where they overlap or touch, in order."""
    merged: list[tuple[float, float]] = []
    for start, stop in sorted(spans):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], stop))
        elif stop > start:
            merged.append((start, stop))
    return merged


def energy_integral(points: Sequence[tuple[float, float | None]],
                    spans: Sequence[tuple[float, float]],
                    max_gap_s: float = ENERGY_MAX_GAP_S) -> tuple[float | None, float, float]:
    """(joules, seconds covered, seconds not covered) of the power samples `(t, watts or None)`
    over the disjoint `spans`, by the rule in the module's docstring. Joules is None where no
    sample holds a power reading."""
    known = sorted((t, w) for t, w in points if w is not None)
    total = sum(stop - start for start, stop in spans)
    if not known:
        return None, 0.0, total
    times = [t for t, _ in known]
    joules = covered = 0.0
    for start, stop in spans:
        for lo, hi, w_lo, w_hi in _energy_pieces(known, times, start, stop, max_gap_s):
            joules += (hi - lo) * (w_lo + w_hi) / 2
            covered += hi - lo
    return joules, covered, max(0.0, total - covered)


def _energy_pieces(known: Sequence[tuple[float, float]], times: Sequence[float], start: float,
                   stop: float, max_gap_s: float) -> list[tuple[float, float, float, float]]:
    """The stretches of [start, stop] the readings cover: (from, to, watts at from, at to)."""
    import bisect  # here, not at the top: every agent start would pay for it
    first = bisect.bisect_left(times, start)  # the first reading at or after start
    last = bisect.bisect_right(times, stop) - 1  # the last reading at or before stop
    before = known[first - 1] if first > 0 else None
    after = known[last + 1] if last + 1 < len(known) else None
    if first > last:  # no reading inside: bridged only between two close ones, or flat
        if before is not None and after is not None and after[0] - before[0] <= max_gap_s:
            return [(start, stop, _energy_at(before, after, start),
                     _energy_at(before, after, stop))]
        near = [r for r in (before, after) if r is not None
                and max(abs(r[0] - start), abs(r[0] - stop)) <= max_gap_s]
        return [(start, stop, near[0][1], near[0][1])] if near else []
    pieces = []
    head, tail = known[first], known[last]
    if head[0] > start:
        if before is not None and head[0] - before[0] <= max_gap_s:
            pieces.append((start, head[0], _energy_at(before, head, start), head[1]))
        elif head[0] - start <= max_gap_s:
            pieces.append((start, head[0], head[1], head[1]))
    for k in range(first, last):
        (t0, w0), (t1, w1) = known[k], known[k + 1]
        if 0 < t1 - t0 <= max_gap_s:
            pieces.append((t0, t1, w0, w1))
    if tail[0] < stop:
        if after is not None and after[0] - tail[0] <= max_gap_s:
            pieces.append((tail[0], stop, tail[1], _energy_at(tail, after, stop)))
        elif stop - tail[0] <= max_gap_s:
            pieces.append((tail[0], stop, tail[1], tail[1]))
    return pieces


def _energy_at(a: tuple[float, float], b: tuple[float, float], t: float) -> float:
    """The power at `t` on the line from reading a to reading b."""
    if b[0] == a[0]:
        return a[1]
    return a[1] + (b[1] - a[1]) * (t - a[0]) / (b[0] - a[0])


def energy_gpu_costs(masks: Mapping[str, str], spans: Mapping[str, tuple[float, float]],
                     gpus: Sequence[tuple[int, str, str]],
                     samples: Mapping[int, Sequence[tuple[float, float | None]]],
                     owners: Iterable[tuple[float, int | None, str]],
                     unsampled: str | None = None) -> list[GpuCost]:
    """What each GPU of one host cost the run, by index.

    `masks`: task → CUDA_VISIBLE_DEVICES (the run's tasks on this host); `spans`: task →
    (first start, last exit) (`energy_task_spans`); `gpus`: the host's (index, uuid, name)
    (gpus.json); `samples`: index → (t, power W or None) (gpu.csv); `owners`: (t, index, owner)
    (owners.csv); `unsampled`: why the host recorded no GPU sample, if it recorded none."""
    held: dict[int, list[tuple[float, float]]] = {}
    for task, mask in masks.items():
        if task in spans:
            for index in energy_mask_indices(mask, [(i, u) for i, u, _ in gpus]):
                held.setdefault(index, []).append(spans[task])
    names = {i: n for i, _, n in gpus}
    seen = list(owners)
    costs = []
    for index in sorted(held):
        hold = energy_union(held[index])
        held_s = sum(stop - start for start, stop in hold)
        if held_s <= 0:
            continue
        joules, covered, uncovered = energy_integral(samples.get(index, ()), hold)
        why = None
        if unsampled is not None or not samples.get(index):
            why = f"no GPU samples: {unsampled or 'nvidia-smi gave none for this GPU'}"
        elif joules is None:
            why = ENERGY_NO_POWER
        elif covered <= 0:
            why = "no power reading while the run held it"
        others = sorted({o for t, i, o in seen if i == index and o.startswith(("run:", "foreign:"))
                         and any(start <= t <= stop for start, stop in hold)})
        costs.append(GpuCost(index, names.get(index, ""), round(held_s, 1),
                             None if why else round((joules or 0.0) / 3600, 4), why,
                             None if why else round(uncovered, 1), tuple(others)))
    return costs


def energy_of_run(run_dir: str, live: bool) -> list[GpuCost]:
    """This host's costs of the run, from its records; kept in `ENERGY_FILE` and read from
    there while none of the records changed since (a live run's are computed at each ask)."""
    cached = read_json(os.path.join(run_dir, ENERGY_FILE))
    newest = max((_energy_mtime(os.path.join(run_dir, n)) for n in ENERGY_SOURCES), default=0.0)
    if isinstance(cached, dict) and not live and cached.get("sources_mtime") == newest \
            and cached.get("version") == ENERGY_VERSION:
        return [GpuCost.from_wire(c) for c in cached.get("gpus") or []]
    costs = _energy_compute(run_dir, live)
    if not live:
        with contextlib.suppress(OSError):  # no room: computed again at the next ask
            write_json(os.path.join(run_dir, ENERGY_FILE),
                       {"version": ENERGY_VERSION, "sources_mtime": newest,
                        "gpus": [c.to_wire() for c in costs]})
    return costs


def energy_why_unsampled(info: Mapping[str, Any], present: bool) -> str:
    """Why a host's `gpu.csv` holds no sample, from its `gpus.json` (the recorder's word;
    `present`: the file exists)."""
    if info.get("unrecorded"):
        return str(info["unrecorded"])
    if not present:
        return "its run folder holds no gpus.json: the recorder did not start"
    if not info.get("gpus"):
        return "nvidia-smi listed no GPUs"
    return "nvidia-smi gave no sample"


def _energy_mtime(path: str) -> float:
    try:
        return os.stat(path).st_mtime
    except OSError:
        return 0.0


def _energy_compute(run_dir: str, live: bool) -> list[GpuCost]:
    manifest = read_json(os.path.join(run_dir, "manifest.json")) or {}
    info_path = os.path.join(run_dir, "gpus.json")
    info = read_json(info_path) or {}
    started = float(info.get("started_at") or manifest.get("created_at") or 0.0)
    gpus = [(int(g["index"]), str(g.get("uuid") or ""), str(g.get("name") or ""))
            for g in info.get("gpus") or [] if str(g.get("index", "")).isdigit()]
    masks = {str(t["name"]): energy_task_mask(t) for t in manifest.get("tasks", [])}
    wanted = {str(i) for mask in masks.values()
              for i in energy_mask_indices(mask, [(i, u) for i, u, _ in gpus])}
    samples, last_sample = _energy_samples(os.path.join(run_dir, "gpu.csv"), started, wanted)
    last_s = started if last_sample is None else last_sample
    events = []
    for line in _energy_lines(os.path.join(run_dir, "events.jsonl")):
        raw = _energy_json(line)
        if raw.get("t") is not None and raw.get("task"):
            events.append((str(raw["task"]), str(raw.get("event")), float(raw["t"])))
            last_s = max(last_s, float(raw["t"]))
    owners = []
    for line in _energy_lines(os.path.join(run_dir, "owners.csv")):
        parts = line.rstrip("\n").split(",", 4)
        seconds = _energy_number(parts[0])
        if len(parts) == 5 and seconds is not None:
            owners.append((started + seconds, int(parts[1]) if parts[1].isdigit() else None,
                           parts[4]))
    spans = energy_task_spans(events, time.time() if live else last_s)
    unsampled = None if last_sample is not None else \
        energy_why_unsampled(info, os.path.exists(info_path))
    return energy_gpu_costs(masks, spans, gpus, samples, owners, unsampled)


def _energy_samples(path: str, started: float, wanted: set[str]
                    ) -> tuple[dict[int, list[tuple[float, float | None]]], float | None]:
    """gpu.csv's (time, power W or None) of the GPUs `wanted` (their indices as written), and
    the time of its last sample of any GPU (None: it holds none). About 1 s for a day of four
    GPUs (16 MB) here: a live run's are read at each ask, an ended run's once."""
    samples: dict[int, list[tuple[float, float | None]]] = {}
    last = None
    for line in _energy_lines(path):
        parts = line.split(",")
        if len(parts) != 7 or not parts[1].isdigit():
            continue
        try:
            t = started + float(parts[0])
        except ValueError:
            continue
        last = t
        if parts[1] in wanted:
            samples.setdefault(int(parts[1]), []).append((t, _energy_number(parts[5])))
    return samples, last


def _energy_lines(path: str) -> Iterator[str]:
    """The file's lines, one at a time (gpu.csv may hold 64 MB); none where it is missing."""
    if not os.path.exists(path):
        return
    with contextlib.suppress(OSError), open(path, encoding="utf-8", errors="replace") as f:
        yield from f


def _energy_number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def _energy_json(line: str) -> dict[str, Any]:
    import json

    try:
        raw = json.loads(line)
    except ValueError:
        return {}
    return raw if isinstance(raw, dict) else {}
