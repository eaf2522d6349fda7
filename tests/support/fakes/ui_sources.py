"""Fakes of the dashboard's sources, holding the situation of docs/dashboard.md with fixed data.

titan has 4 TITAN X (GPU 2 idle: worker:2 exited 1 out of memory, restart limit reached),
gtx970 one GTX 970 with no power sensor (power None, shown "n/a") and the slow worker:4,
old-box is unreachable. The fakes record every call so tests can check what the UI did; they
are plain objects satisfying `tfctl.tui.app.sources`' Protocols, not mocks.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from tfctl.inventory import make_plan, parse_inventory
from tfctl.inventory.model import Inventory
from tfctl.remote.agent.vocab import GpuState
from tfctl.remote.agent.wirerecord import replace as replace_record
from tfctl.remote.connect.session.agentops import StartState
from tfctl.remote.controller import DownSummary, UpOptions
from tfctl.remote.errors import CommandFailed, GpusBusy, HostUnreachable
from tfctl.remote.gpus.lastseen import GpuHistory, HostTelemetry
from tfctl.remote.gpus.nvsmi import GpuProcess, GpuSample
from tfctl.remote.history.listing import RunSummary
from tfctl.remote.lab.view import HostLab, host_lab
from tfctl.remote.runs.current import CurrentRun
from tfctl.remote.runs.logs import LogBatch
from tfctl.remote.runs.relaunch import RestartResult
from tfctl.remote.runs.status import RunStatus, TaskStatus
from tfctl.remote.sync.result import SyncResult
from tfctl.tui.app.sources import AppFinding

RUN_ID = "2026-11-22-0931"
# 2026-11-22 09:42:10 UTC: snapshot tests run with TZ=UTC, so "since 09:42:10" is stable.
FIXED_WALL_S = 1795340530.0

LAB_YAML = """\
name: lab
defaults: {user: alice, workdir: ~/tfctl/lab, python: python3}
hosts:
  - {name: titan, address: 192.168.0.80, gpus: 4, ps: 1}
  - {name: gtx970, address: 192.168.0.20, gpus: [0], ps: 1}
  - {name: old-box, address: 192.168.0.31, gpus: 0, ps: 1}
job:
  script: train.py
  tensorboard: {host: titan, logdir: out, port: 6006}
  restart: {worker: on-failure, max: 3}
"""


def lab_inventory() -> Inventory:
    return parse_inventory(LAB_YAML)


def _mib(gib: float) -> float:
    return round(gib * 1024)


def _titan(index: int, util: float, used_gib: float, temp: float, power: float) -> GpuSample:
    return GpuSample(uuid=f"GPU-0000000{index}-aaaa-bbbb-cccc-titan0000000", index=index,
                     name="NVIDIA GeForce GTX TITAN X", utilization_gpu_pct=util,
                     memory_used_mib=_mib(used_gib), memory_total_mib=12288.0,
                     temperature_c=temp, power_draw_w=power)


TITAN_GPUS = (
    _titan(0, 97, 11.2, 71, 231),
    _titan(1, 93, 11.2, 69, 224),
    _titan(2, 0, 0.2, 34, 15),
    _titan(3, 92, 11.1, 70, 226),
)
GTX970_GPU = GpuSample(uuid="GPU-00000000-aaaa-bbbb-cccc-gtx970000000", index=0,
                       name="NVIDIA GeForce GTX 970", utilization_gpu_pct=83,
                       memory_used_mib=_mib(3.7), memory_total_mib=4096.0, temperature_c=78,
                       power_draw_w=None)
PIDS = {"worker:0": 1001, "worker:1": 1002, "worker:3": 1004, "worker:4": 2001}


def lab_tasks() -> dict[str, tuple[TaskStatus, ...]]:
    def run(name: str, host: str, pid: int, up: float, last: str = "", mask: str = ""
            ) -> TaskStatus:
        return TaskStatus(name, host, "running", pid=pid, uptime_s=up, last_line=last, mask=mask)

    step = "step 1180, loss = 0.42 (2580.3 examples/sec) steps_per_sec={}"
    return {
        "titan": (
            run("ps:0", "titan", 900, 761),
            run("worker:0", "titan", 1001, 758, step.format(41.2), "0"),
            run("worker:1", "titan", 1002, 758, step.format(40.8), "1"),
            TaskStatus("worker:2", "titan", "exited", pid=1003, exit_code=1, uptime_s=3,
                       restarts=3, mask="2", last_line="ResourceExhaustedError: OOM when "
                       "allocating tensor with shape[128,64,56,56]"),
            run("worker:3", "titan", 1004, 758, step.format(40.9), "3"),
            run("tensorboard:0", "titan", 950, 761, "TensorBoard 2.21 at http://127.0.0.1:6006/"),
        ),
        "gtx970": (
            run("ps:1", "gtx970", 901, 760),
            run("worker:4", "gtx970", 2001, 757, step.format(18.3), "0"),
        ),
    }


LAB_LOG_LINES = [
    ("worker:0", "step 1179, loss = 0.43 steps_per_sec=41.1"),
    ("worker:2", "step 1180, loss = 0.42 (2580.3 examples/sec; 0.050 sec/batch)"),
    ("worker:2", "ResourceExhaustedError: OOM when allocating tensor with shape[128,64,56,56]"),
    ("worker:4", "step 1177, loss = 0.45 steps_per_sec=18.3"),
    ("ps:0", "Started server with target: grpc://localhost:2222"),
]

LAB_FINDINGS = [
    AppFinding("warning", "titan GPU 2 idle while its peers are busy: worker:2 exited 1 (out of "
            "memory), restart limit reached", "titan", 2),
    AppFinding("warning", "worker:4 is 2.2× slower than its peers (GTX 970): the synchronous step "
            "waits for it", "gtx970", 0, task="worker:4"),
    AppFinding("error", "old-box unreachable: its tasks are not counted", "old-box"),
]


class FakeFollower:
    def __init__(self, source: FakeController) -> None:
        self.source = source
        self.hosts: list[str] = list(source.run_hosts)
        self.read = 0
        self.polls: list[int | None] = []

    def poll(self, tail_lines: int | None = None) -> LogBatch:
        self.polls.append(tail_lines)
        with self.source.lock:
            lines = self.source.log_lines[self.read:]
            self.read = len(self.source.log_lines)
        return LogBatch(lines=list(lines), errors={})


class FakeController:
    """A run controller with fixed data; every call is recorded in `calls` (thread-safe)."""

    def __init__(self, inventory: Inventory | None = None, *, with_run: bool = True,
                 unreachable: Mapping[str, str] | None = None,
                 delays_s: Mapping[str, float] | None = None) -> None:
        self.inventory = inventory or lab_inventory()
        self.plan = make_plan(self.inventory)
        self.lock = threading.Lock()
        self.calls: list[tuple[str, ...]] = []
        self.tasks = lab_tasks() if with_run else {}
        self.run_id: str | None = RUN_ID if with_run else None
        self.run_hosts = tuple(h.name for h in self.inventory.hosts)
        self.unreachable = dict(unreachable if unreachable is not None
                                else {"old-box": "timed out"})
        self.delays_s = dict(delays_s or {})
        self.log_lines = list(LAB_LOG_LINES) if with_run else []
        self.fail: dict[str, Exception] = {}
        self.followers: list[FakeFollower] = []
        self.busy_gpus: tuple[str, ...] = ()
        """Holder lines: `up` without `force` raises GpusBusy naming them (nothing started)."""
        self.free_gpus = "titan: none"

    def _record(self, *call: str) -> None:
        with self.lock:
            self.calls.append(call)
        if call[0] in self.fail:
            raise self.fail[call[0]]

    def called(self, name: str) -> list[tuple[str, ...]]:
        with self.lock:
            return [c for c in self.calls if c[0] == name]

    def add_log(self, task: str, line: str) -> None:
        with self.lock:
            self.log_lines.append((task, line))

    # -- reads ---------------------------------------------------------------------------------
    def current(self, refresh: bool = False) -> CurrentRun | None:
        self._record("current", str(refresh))
        return CurrentRun(self.run_id, "state file", self.run_hosts) if self.run_id else None

    def host_status(self, host: str) -> tuple[TaskStatus, ...]:
        self._record("host_status", host)
        time.sleep(self.delays_s.get(host, 0.0))
        if host in self.unreachable:
            raise HostUnreachable(host, self.unreachable[host])
        with self.lock:
            return self.tasks.get(host, ())

    def status(self) -> RunStatus | None:
        self._record("status")
        if self.run_id is None:
            return None
        with self.lock:
            tasks = tuple(t for ts in self.tasks.values() for t in ts)
        return RunStatus(self.run_id, tasks, dict(self.unreachable))

    def log_follower(self, tasks: set[str] | None = None) -> FakeFollower | None:
        self._record("log_follower")
        if self.run_id is None:
            return None
        follower = FakeFollower(self)
        self.followers.append(follower)
        return follower

    # -- actions -------------------------------------------------------------------------------
    def sync(self) -> dict[str, SyncResult]:
        self._record("sync")
        return {h: SyncResult(h, "unchanged", 0, 0, (), "~/job") for h in self.run_hosts
                if h not in self.unreachable}

    def up(self, options: UpOptions, on_event: Callable[[str], None]) -> str:
        self._record("up", f"force={options.force}")
        if self.busy_gpus and not options.force:
            raise GpusBusy(self.busy_gpus, self.free_gpus)
        on_event("synced the code to 2 hosts")
        time.sleep(self.delays_s.get("up", 0.0))
        self.run_id = "2026-11-22-1000"
        with self.lock:
            self.tasks = lab_tasks()
        on_event(f"started run {self.run_id}")
        return self.run_id

    def down(self, grace_s: float = 10.0) -> DownSummary:
        self._record("down", str(grace_s))
        with self.lock:
            stopped = [t.name for ts in self.tasks.values() for t in ts if not t.ended]
            self.tasks = {h: tuple(replace_record(t, state="stopped") if not t.ended else t
                                   for t in ts) for h, ts in self.tasks.items()}
        return DownSummary(self.run_id, tuple(sorted(stopped)), tuple(self.unreachable))

    def restart_task(self, task: str) -> None:
        self._record("restart_task", task)
        with self.lock:
            self.tasks = {h: tuple(replace_record(t, state="running", exit_code=None,
                                           restarts=t.restarts + 1, uptime_s=0.0)
                                   if t.name == task else t for t in ts)
                          for h, ts in self.tasks.items()}

    def restart(self, target: str, wait_s: float | None = None) -> RestartResult:
        """The lost tasks of host `target` (or the lost task `target`) running again."""
        self._record("restart", target)
        with self.lock:
            lost = [t for ts in self.tasks.values() for t in ts
                    if t.state == "lost" and target in (t.host, t.name)]
            self.tasks = {h: tuple(replace_record(t, state="running", host_restarted_at_s=None,
                                           uptime_s=0.0) if t in lost else t for t in ts)
                          for h, ts in self.tasks.items()}
        return RestartResult(str(self.run_id), lost[0].host, tuple(t.name for t in lost),
                             lost[0].host_restarted_at_s, 4242,
                             {t.name: StartState(t.name, "listening") for t in lost})

    def runs(self) -> list[RunSummary]:
        """Two past runs: the one shown and an older one that failed."""
        self._record("runs")
        return [RunSummary(RUN_ID, started_at=1795500000.0, live=True),
                RunSummary("2026-11-21-1800", started_at=1795420000.0, finished_at=1795423600.0,
                           ended="exit 1: chief:0 ended", exit_code=1)]

    def lab(self) -> list[HostLab]:
        """The seeds' box: titan's GPU 0 held by alice's run, 1 reserved by bob, 2 held by
        carol's forgotten notebook for 40 min at 0 %, 3 free with a stale claim; gtx970 free;
        old-box without nvidia-smi."""
        self._record("lab")
        return [host_lab(name, GpuState.from_wire(answer), idle_after_s=600)
                for name, answer in lab_answers()]

    def close(self) -> None:
        self._record("close")


def lab_answers() -> list[tuple[str, dict[str, Any]]]:
    """Each host's `lab` answer (remote/agent/lab.py), fixed at FIXED_WALL_S."""
    now = FIXED_WALL_S

    def claim(user: str, uid: int, kind: str, **extra: object) -> dict[str, object]:
        return {"file": f"{user}.{kind}.x.json", "uid": uid, "user": user, "kind": kind,
                "state": "live", "gpus": [], "tasks": [], "since": now - 5400, "until": None,
                "run_id": None, "job": None, "note": None, **extra}

    def gpu(index: int, used: float, util: float, name: str = "NVIDIA TITAN X (Pascal)",
            total: float = 12288.0) -> dict[str, object]:
        return {"index": index, "uuid": f"GPU-{index}", "name": name, "memory_used_mib": used,
                "memory_total_mib": total, "utilization_pct": util}

    titan: dict[str, Any] = {
        "me": {"uid": 1002, "user": "bob"}, "error": None,
        "claims": [claim("alice", 1001, "run", run_id="2026-11-25-0900", job="mnist",
                         gpus=[0], tasks=[{"name": "worker:0", "gpus": [0], "pid": 4242,
                                           "pgid": 4240}]),
                   claim("bob", 1002, "reservation", gpus=[1], since=now - 600,
                         until=now + 3 * 86400, note="ICML runs"),
                   claim("alice", 1001, "run", state="stale", run_id="2026-11-24-2200",
                         gpus=[3], tasks=[{"name": "worker:1", "gpus": [3], "pid": 77,
                                           "pgid": 77}])],
        "warnings": [],
        "gpus": [gpu(0, 9800, 97), gpu(1, 5, 0), gpu(2, 11000, 0), gpu(3, 5, 0)],
        "apps": [{"gpu_uuid": "GPU-0", "pid": 4242, "used_memory_mib": 9795.0},
                 {"gpu_uuid": "GPU-2", "pid": 3131, "used_memory_mib": 10995.0}],
        "procs": {"4242": {"pid": 4242, "uid": 1001, "user": "alice", "pgid": 4240,
                           "cmdline": "python train.py", "since": now - 5300},
                  "3131": {"pid": 3131, "uid": 1003, "user": "carol", "pgid": 3131,
                           "cmdline": "python -m ipykernel_launcher", "since": now - 86400}},
        "idle": {"sampled_at": now, "watching_since": now - 7200, "sample_s": 10.0,
                 "low_since": {"2": {"3131": now - 2400}}}}
    bob = {"uid": 1002, "user": "bob"}
    gtx970: dict[str, Any] = {
        "me": bob, "error": None, "claims": [], "warnings": [], "apps": [], "procs": {},
        "gpus": [gpu(0, 5, 0, "NVIDIA GeForce GTX 970", 4096.0)],
        "idle": {"sampled_at": None, "low_since": {}}}
    old_box: dict[str, Any] = {
        "me": bob, "error": "no nvidia-smi on the PATH there", "claims": [], "warnings": [],
        "gpus": [], "apps": [], "procs": {}, "idle": {}}
    return [("titan", titan), ("gtx970", gtx970), ("old-box", old_box)]


def failing_sync(host: str = "gtx970") -> CommandFailed:
    return CommandFailed(host, "rsync -a ./ gtx970:/data/tfctl", 23,
                         "rsync: write failed on \"/data/tfctl/ckpt\": No space left on device")


class FakeTelemetry:
    """Fixed GPU samples per host; always fresh unless a host has an error."""

    def __init__(self, monotonic: Callable[[], float] = time.monotonic) -> None:
        self.monotonic = monotonic
        self.calls: list[str] = []
        self._history = GpuHistory()
        self.gpus: dict[str, tuple[GpuSample, ...]] = {"titan": TITAN_GPUS,
                                                       "gtx970": (GTX970_GPU,)}
        self.processes: dict[str, tuple[GpuProcess, ...]] = {
            "titan": tuple(GpuProcess(TITAN_GPUS[i].uuid, PIDS[f"worker:{i}"], 11000.0,
                                      "python3") for i in (0, 1, 3)),
            "gtx970": (GpuProcess(GTX970_GPU.uuid, PIDS["worker:4"], 3700.0, "python3"),),
        }
        self.errors: dict[str, str] = {"old-box": "ssh: connect to 192.168.0.31 timed out"}
        shapes = {0: (60, 95), 1: (55, 93), 2: (90, 0), 3: (50, 92)}
        for t in range(16):
            samples = [replace(g, utilization_gpu_pct=_ramp(*shapes[g.index or 0], t))
                       for g in TITAN_GPUS]
            self._history.record("titan", samples, at_s=float(t))
            self._history.record("gtx970", [replace(GTX970_GPU, utilization_gpu_pct=
                                                    _ramp(40, 83, t))], at_s=float(t))

    @property
    def history(self) -> GpuHistory:
        return self._history

    def snapshot(self, host: str) -> HostTelemetry:
        if host in self.errors:
            return HostTelemetry(host, error=self.errors[host])
        return HostTelemetry(host, self.gpus.get(host, ()), self.processes.get(host, ()),
                             last_sample_at=self.monotonic())

    def start(self) -> None:
        self.calls.append("start")

    def stop(self) -> None:
        self.calls.append("stop")


def _ramp(start: float, end: float, t: int) -> float:
    """A fixed curve from `start` to `end` over 16 samples (for sparklines)."""
    return start + (end - start) * min(1.0, t / 10)


class FakeTunnel:
    def __init__(self, url: str = "http://127.0.0.1:6006") -> None:
        self.url = url
        self.calls: list[str] = []
        self.fail: Exception | None = None
        self.port_note: str | None = None

    def open(self) -> str:
        self.calls.append("open")
        if self.fail is not None:
            raise self.fail
        return self.url

    def close(self) -> None:
        self.calls.append("close")


def lab_findings() -> list[AppFinding]:
    return list(LAB_FINDINGS)
