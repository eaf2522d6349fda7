#!/usr/bin/env python3
"""CPU used by the dashboard process, and its frame latency, at the default refresh; and the
dashboard's CPU against a bare Textual app's showing the same screen from the same sources.

    python benchmarks/ui_cpu.py                      # 16 hosts × 8 GPUs, 160×48, 30 s
    python benchmarks/ui_cpu.py --size 80x24 --seconds 20
    python benchmarks/ui_cpu.py --hosts 4 --gpus 4 --view logs
    python benchmarks/ui_cpu.py --versus-bare --reps 5   # dashboard ÷ bare Textual, one run
    python benchmarks/ui_cpu.py --versus-bare --full --baseline /tmp/before   # + another tree
    python benchmarks/ui_cpu.py --app bare           # the bare app alone, in this process

The real `TfctlApp` runs headless over synthetic sources in this process: every GPU gets a new
sample each second (utilization, memory, temperature, power all move, so every GPU line
changes), every task's uptime and steps/s change at each 2 s poll, and each worker writes one
log line per second. Sources cost next to nothing (no I/O; a 20 ms sleep stands in for a poll's
round trip and costs no CPU), so the CPU measured is the UI's.

Headless Textual skips turning the screen update into terminal bytes; by default this script
does that work anyway (and throws the bytes away) so the number is what a terminal would cost;
`--no-encode` measures without it.

Measured after a warm-up: CPU seconds of this process (all threads: the UI loop and the poll
workers) per wall second, as % of one core (goal ≤ 5 %); frames per second; frame latency, from
the start of a refresh tick to the end of the first screen update painted after it (p50, p95,
max); and the tick's own time (reading telemetry, building lines, diffing widgets).

`--versus-bare`: the fair peer is `ui_bare.py`, Textual's stock widgets showing the same rows and
columns from the same sources at the same rates (its docstring says what it does and does not
do). Each repetition runs the dashboard and the peer one after the other, each in a process of
its own (the order alternates), each measuring its own CPU (getrusage of itself, all threads)
over the same window after the same warm-up, at the same terminal size, with the same terminal
encoding; printed: the medians and the ratio dashboard ÷ bare of the medians and per repetition
(goal ≤ 1.5). The wide layout only (the peer has no compact one): 120×34 or more. `--baseline
DIR` adds the dashboard of another tree (DIR/tfctl, first on PYTHONPATH) as `before`.

Which second is measured: by default the first half minute after the dashboard opens, while
the log pane fills (128 workers' lines a second; Textual's `Log` holds 10,000) and the GPU
histories fill (120 samples). `--full` starts the sources as after minutes of a busy job (the
histories full, a first log batch of 10,000 lines), so the window is the steady state of a
dashboard left open. On a machine shared with other work, `nice -n -10` keeps the two apps from
dropping frames (a CPU-starved app skips frames and so seems to cost less).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import platform
import random
import resource
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tfctl.inventory import make_plan, parse_inventory
from tfctl.inventory.model import Inventory
from tfctl.remote.controller import DownSummary
from tfctl.remote.gpus.lastseen import GpuHistory, HostTelemetry
from tfctl.remote.gpus.nvsmi import GpuProcess, GpuSample
from tfctl.remote.runs.current import CurrentRun
from tfctl.remote.runs.logs import LogBatch
from tfctl.remote.runs.status import TaskStatus

POLL_RTT_S = 0.02
FULL_LOG_LINES = 10_000
"""`--full`: the log pane's capacity (the dashboard's and the bare app's), reached at once."""


def synthetic_inventory(hosts: int, gpus: int) -> Inventory:
    lines = ["name: bench", "hosts:"]
    lines += [f"  - {{name: node{i:02d}, address: 10.0.0.{i + 1}, gpus: {gpus}}}"
              for i in range(hosts)]
    lines += ["job: {script: train.py, tensorboard: {host: node00}}"]
    return parse_inventory("\n".join(lines) + "\n")


class SyntheticTelemetry:
    """A new sample for every GPU each second, made when the UI asks (no thread)."""

    def __init__(self, inv: Inventory, pids: dict[tuple[str, str], int],
                 full: bool = False) -> None:
        """`full`: every GPU's history starts full, as after two minutes."""
        self._history = GpuHistory()
        self.inv = inv
        self.pids = pids
        self.rng = random.Random(7)
        self._second: dict[str, int] = {}
        self._snap: dict[str, HostTelemetry] = {}
        now = time.monotonic()
        for past_s in range(self._history.length if full else 0, 0, -1):
            for host in inv.hosts:
                self._sample(host.name, now - past_s)

    @property
    def history(self) -> GpuHistory:
        return self._history

    def snapshot(self, host: str) -> HostTelemetry:
        now = time.monotonic()
        second = int(now)
        if self._second.get(host) != second:
            self._second[host] = second
            self._snap[host] = self._sample(host, now)
        return self._snap[host]

    def _sample(self, host: str, now: float) -> HostTelemetry:
        count = len(self.inv.host(host).gpus)
        gpus, procs = [], []
        for i in range(count):
            uuid = f"GPU-{abs(hash(host)) % 10**8:08d}-{i:04d}-0000-0000-000000000000"
            util = max(0.0, min(100.0, 80 + 15 * math.sin(now / 7 + i) + self.rng.uniform(-5, 5)))
            gpus.append(GpuSample(
                uuid=uuid, index=i, name="NVIDIA GeForce GTX TITAN X", utilization_gpu_pct=util,
                memory_used_mib=11000 + self.rng.uniform(-200, 200), memory_total_mib=12288.0,
                temperature_c=65 + self.rng.uniform(0, 10), power_draw_w=200 + util / 2))
            pid = self.pids.get((host, str(i)))
            if pid is not None:
                procs.append(GpuProcess(uuid, pid, 11000.0, "python3"))
        self._history.record(host, gpus, now)
        return HostTelemetry(host, tuple(gpus), tuple(procs), last_sample_at=now)

    def start(self) -> None: ...

    def stop(self) -> None: ...


class SyntheticFollower:
    def __init__(self, workers: list[str], backlog_lines: int = 0) -> None:
        """`backlog_lines`: the first poll also brings about this many older lines."""
        self.hosts: list[str] = []
        self.workers = workers
        self.last = time.monotonic() - math.ceil(backlog_lines / max(1, len(workers)))
        self.step = 0

    def poll(self, tail_lines: int | None = None) -> LogBatch:
        time.sleep(POLL_RTT_S)
        now = time.monotonic()
        seconds = max(1, round(now - self.last))
        self.last = now
        lines = []
        for _ in range(seconds):
            self.step += 1
            lines += [(w, f"step {self.step}, loss = {1 / self.step:.4f} "
                          f"steps_per_sec={40 + random.random():.1f}") for w in self.workers]
        return LogBatch(lines=lines, errors={})


class SyntheticController:
    def __init__(self, inv: Inventory, backlog_lines: int = 0) -> None:
        self.backlog_lines = backlog_lines
        self.inventory = inv
        self.plan = make_plan(inv)
        self.started = time.monotonic()
        self.pids = {t.name: 10000 + n for n, t in enumerate(self.plan.tasks)}

    def gpu_pids(self) -> dict[tuple[str, str], int]:
        return {(t.host, t.cuda_visible_devices): self.pids[t.name] for t in self.plan.tasks
                if t.type == "worker" and t.cuda_visible_devices}

    def current(self, refresh: bool = False) -> CurrentRun:
        return CurrentRun("bench", "state file", self.plan.hosts_used)

    def host_status(self, host: str) -> tuple[TaskStatus, ...]:
        time.sleep(POLL_RTT_S)
        up = time.monotonic() - self.started
        return tuple(TaskStatus(t.name, host, "running", pid=self.pids[t.name], uptime_s=up,
                                mask=t.cuda_visible_devices,
                                last_line=f"steps_per_sec={40 + random.random():.1f}")
                     for t in self.plan.on_host(host))

    def status(self) -> None:
        return None

    def log_follower(self, tasks: set[str] | None = None) -> SyntheticFollower:
        return SyntheticFollower([t.name for t in self.plan.tasks if t.type == "worker"],
                                 self.backlog_lines)

    def sync(self) -> dict[str, object]:
        return {}

    def up(self, options: object, on_event: Callable[[str], None]) -> str:
        return "bench"

    def down(self, grace_s: float = 10.0) -> DownSummary:
        return DownSummary("bench", (), ())

    def restart_task(self, task: str) -> None: ...

    def close(self) -> None: ...


def cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


class Probe:
    """Timestamps of refresh ticks and screen updates, for latency."""

    def __init__(self) -> None:
        self.recording = False
        self.tick_starts: list[float] = []
        self.tick_s: list[float] = []
        self.frames: list[tuple[float, float]] = []  # (start, end) of each screen update
        self.encoded_bytes = 0

    def latencies_ms(self) -> list[float]:
        out = []
        ends = [end for _, end in self.frames]
        for start in self.tick_starts:
            later = [end for end in ends if end >= start]
            if later:
                out.append((min(later) - start) * 1000)
        return out


def instrument(app: Any, probe: Probe, encode: bool) -> None:
    tick = app.tick

    def timed_tick() -> None:
        start = time.perf_counter()
        tick()
        if probe.recording:
            probe.tick_starts.append(start)
            probe.tick_s.append(time.perf_counter() - start)

    app.tick = timed_tick
    display = app._display

    def timed_display(screen: Any, renderable: Any) -> None:
        start = time.perf_counter()
        if encode and renderable is not None and hasattr(renderable, "render_segments"):
            probe.encoded_bytes += len(renderable.render_segments(app.console))
        display(screen, renderable)
        if probe.recording:
            probe.frames.append((start, time.perf_counter()))

    app._display = timed_display


def build_app(which: str, controller: SyntheticController, telemetry: SyntheticTelemetry
              ) -> Any:
    """The dashboard (default refresh: GPUs 1 s, tasks 2 s, logs 1 s), or its bare peer at
    the same rates."""
    if which == "bare":
        from ui_bare import BareDashboard

        return BareDashboard(controller, telemetry)
    from tfctl.tui.app.factory import make_app

    return make_app(controller, telemetry)


async def measure(args: argparse.Namespace) -> dict[str, float]:
    inv = synthetic_inventory(args.hosts, args.gpus)
    controller = SyntheticController(inv, FULL_LOG_LINES if args.full else 0)
    telemetry = SyntheticTelemetry(inv, controller.gpu_pids(), full=args.full)
    app = build_app(args.app, controller, telemetry)
    probe = Probe()
    instrument(app, probe, encode=not args.no_encode)
    width, height = (int(x) for x in args.size.split("x"))
    async with app.run_test(size=(width, height)) as pilot:
        if args.view != "tasks":
            await pilot.press({"logs": "l", "findings": "F"}[args.view])
        await asyncio.sleep(args.warmup)
        probe.recording = True
        cpu0, wall0 = cpu_s(), time.perf_counter()
        await asyncio.sleep(args.seconds)
        cpu1, wall1 = cpu_s(), time.perf_counter()
        probe.recording = False
        lines = len(app.logs) if args.app == "dashboard" else app.query_one("#logs").line_count
    wall = wall1 - wall0
    lat = sorted(probe.latencies_ms())
    ticks = sorted(t * 1000 for t in probe.tick_s)
    frame_ms = sorted((end - start) * 1000 for start, end in probe.frames)

    def pct(values: list[float], q: float) -> float:
        return values[min(len(values) - 1, int(q * len(values)))] if values else float("nan")

    return {
        "cpu_pct_of_one_core": 100 * (cpu1 - cpu0) / wall,
        "frames_per_s": len(probe.frames) / wall,
        "latency_p50_ms": pct(lat, 0.5), "latency_p95_ms": pct(lat, 0.95),
        "latency_max_ms": lat[-1] if lat else float("nan"),
        "tick_p50_ms": pct(ticks, 0.5), "tick_p95_ms": pct(ticks, 0.95),
        "frame_p50_ms": statistics.median(frame_ms) if frame_ms else float("nan"),
        "log_lines_kept": lines, "threads_now": threading.active_count(),
    }


def versus_bare(args: argparse.Namespace) -> None:
    """The dashboard and its bare peer, each in a process of its own, alternating."""
    from _common import machine_line, median, ratio

    same = ["--hosts", str(args.hosts), "--gpus", str(args.gpus), "--size", args.size,
            "--seconds", str(args.seconds), "--warmup", str(args.warmup), "--json"]
    same += [flag for flag, on in (("--no-encode", args.no_encode), ("--full", args.full)) if on]
    print(machine_line())
    print(f"dashboard ÷ bare Textual · {args.hosts} hosts × {args.gpus} GPUs · {args.size} · "
          f"{args.reps} × ({args.seconds:g} s after {args.warmup:g} s warm-up) each · "
          f"{'no ' if args.no_encode else ''}terminal encoding"
          f"{' · sources full (steady state)' if args.full else ''}")
    # contender → (--app, PYTHONPATH): "before" is the dashboard of the --baseline tree
    contenders = {"dashboard": ("dashboard", None), "bare": ("bare", None)}
    if args.baseline:
        contenders["before"] = ("dashboard", args.baseline)
    names = list(contenders)
    results: dict[str, list[dict[str, float]]] = {name: [] for name in names}
    for rep in range(args.reps):
        for name in names[rep % len(names):] + names[:rep % len(names)]:
            app, path = contenders[name]
            env = dict(os.environ, PYTHONPATH=path) if path else None
            child = subprocess.run([sys.executable, __file__, "--app", app, *same], env=env,
                                   capture_output=True, text=True)
            if child.returncode != 0:
                raise SystemExit(f"{name} failed (exit {child.returncode}):\n"
                                 + "\n".join(child.stderr.splitlines()[-8:]))
            results[name].append(json.loads(child.stdout.strip().splitlines()[-1]))
        cpu = {name: results[name][-1]["cpu_pct_of_one_core"] for name in names}
        print(f"  rep {rep + 1}: " + " · ".join(f"{name} {cpu[name]:.2f} %" for name in names)
              + " · " + " · ".join(f"{name} ÷ bare {ratio(cpu[name], cpu['bare'])}"
                                   for name in names if name != "bare"), flush=True)
    for name in names:
        runs = results[name]
        print(f"  {name:<9} CPU {median(r['cpu_pct_of_one_core'] for r in runs):5.2f} % of one "
              f"core · {median(r['frames_per_s'] for r in runs):.1f} frames/s · tick p50 "
              f"{median(r['tick_p50_ms'] for r in runs):.1f} ms · frame p50 "
              f"{median(r['frame_p50_ms'] for r in runs):.1f} ms")
    bare = [r["cpu_pct_of_one_core"] for r in results["bare"]]
    for name in (n for n in names if n != "bare"):
        cpu_pct = [r["cpu_pct_of_one_core"] for r in results[name]]
        each = median(c / b for c, b in zip(cpu_pct, bare, strict=True))
        print(f"  ratio     {name} ÷ bare {ratio(median(cpu_pct), median(bare))} (medians; goal "
              f"≤ 1.5) · per repetition {each:.2f} (median)")
    print(machine_line())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hosts", type=int, default=16)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--size", default="160x48", help="terminal WxH")
    parser.add_argument("--view", choices=("tasks", "logs", "findings"), default="tasks")
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--warmup", type=float, default=5.0)
    parser.add_argument("--no-encode", action="store_true",
                        help="skip turning screen updates into terminal bytes")
    parser.add_argument("--app", choices=("dashboard", "bare"), default="dashboard",
                        help="what runs in this process: tfctl's dashboard or its bare peer")
    parser.add_argument("--versus-bare", action="store_true",
                        help="dashboard ÷ bare Textual app, each in its own process, alternating")
    parser.add_argument("--reps", type=int, default=5, help="repetitions of --versus-bare")
    parser.add_argument("--baseline", metavar="DIR",
                        help="--versus-bare: also the dashboard of the tfctl/ tree under DIR "
                             "(put first on PYTHONPATH), as `before`")
    parser.add_argument("--json", action="store_true", help="print the result as one JSON line")
    parser.add_argument("--full", action="store_true",
                        help="start as after minutes of a busy job (each GPU's history full, "
                             f"a first log batch of {FULL_LOG_LINES:,} lines): the steady state")
    args = parser.parse_args()
    width, height = (int(x) for x in args.size.split("x"))
    if (args.versus_bare or args.app == "bare") and (width < 120 or height < 34
                                                     or args.view != "tasks"):
        parser.error("the bare app has the wide layout's tasks view only: --size 120x34 or more")
    if args.versus_bare:
        versus_bare(args)
        return
    result = asyncio.run(measure(args))
    if args.json:
        print(json.dumps(result))
        return
    print(f"tfctl ui benchmark · {args.app} · {args.hosts} hosts × {args.gpus} GPUs · "
          f"{args.size} · view {args.view} · {args.seconds:g} s after {args.warmup:g} s warm-up · "
          f"{'no ' if args.no_encode else ''}terminal encoding · "
          f"{'sources full (steady state) · ' if args.full else ''}"
          f"{platform.python_version()} on {platform.machine()} · "
          f"{time.strftime('%Y-%m-%d %H:%M')}")
    print(f"  CPU             {result['cpu_pct_of_one_core']:.1f} % of one core (goal ≤ 5 %)")
    print(f"  frames          {result['frames_per_s']:.1f} /s")
    print(f"  frame latency   p50 {result['latency_p50_ms']:.1f} ms · p95 "
          f"{result['latency_p95_ms']:.1f} ms · max {result['latency_max_ms']:.1f} ms "
          "(refresh tick → screen updated)")
    print(f"  refresh tick    p50 {result['tick_p50_ms']:.1f} ms · p95 "
          f"{result['tick_p95_ms']:.1f} ms; screen update p50 {result['frame_p50_ms']:.1f} ms")


if __name__ == "__main__":
    main()
