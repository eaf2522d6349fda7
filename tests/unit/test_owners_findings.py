"""GPU ↔ task map and findings: pure functions, table-tested on hand-built samples.

The samples are records as the parser produces them; what the stream and the agent really report is
tested end to end in test_telemetry.py (stand-in, local transport) and the lab tests.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import pytest

from tfctl.remote.gpus.findings import (
    ERROR,
    WARNING,
    FindingRules,
    all_findings,
    foreign_findings,
    idle_gpu_findings,
    mask_findings,
    memory_after_down_findings,
    stalled_log_findings,
    stream_findings,
    throttle_findings,
    track_logs,
)
from tfctl.remote.gpus.lastseen import GpuHistory, HostTelemetry
from tfctl.remote.gpus.nvsmi import GpuProcess, GpuSample
from tfctl.remote.gpus.owners import (
    TaskProcesses,
    gpus_in_mask,
    map_owners,
    masked_gpus_without_process,
    masks_by_host,
    owner_lookup,
    pids_by_host,
    task_from_status,
)

UUIDS = [f"GPU-0000000{i}-aaaa-bbbb-cccc-dddddddddddd" for i in range(4)]


def gpu(i: int, util: float | None = 0.0, throttle: str | None = None) -> GpuSample:
    return GpuSample(uuid=UUIDS[i], index=i, name="NVIDIA TITAN X (Pascal)",
                     utilization_gpu_pct=util, memory_used_mib=5.0, memory_total_mib=12288.0,
                     throttle_reasons=throttle)


def proc(i: int, pid: int, mib: float | None = 1500.0) -> GpuProcess:
    return GpuProcess(UUIDS[i], pid, mib, "python")


def snap(host: str, gpus: list[GpuSample], procs: Sequence[GpuProcess] = (),
         at: float | None = 100.0, error: str | None = None) -> HostTelemetry:
    return HostTelemetry(host, tuple(gpus), tuple(procs), error, at)


def task(name: str, mask: str | None, pids: tuple[int, ...] = (), state: str = "running",
         host: str = "titan", **kw: Any) -> TaskProcesses:
    return TaskProcesses(host, name, state, pids, mask, **kw)


# -- masks ------------------------------------------------------------------------------------

@pytest.mark.parametrize(("mask", "expected"), [
    ("0", [0]), ("2,0", [2, 0]), ("", []), (None, []), ("-1", []), ("0,7,1", [0]),
    ("1,1", [1]), (UUIDS[3], [3]), (UUIDS[2][:12], [2]), ("GPU-0000000", []),
])
def test_mask_names_gpus_as_cuda_reads_it(mask: str | None, expected: list[int]) -> None:
    gpus = [gpu(i) for i in range(4)]
    assert [g.index for g in gpus_in_mask(mask, gpus)] == expected


# -- owners -----------------------------------------------------------------------------------

def test_each_gpu_owned_by_task_foreign_shared_or_idle() -> None:
    snaps = {"titan": snap("titan", [gpu(i, 95.0) for i in range(4)],
                           [proc(0, 100), proc(0, 101), proc(1, 200), proc(3, 102), proc(3, 300)])}
    pids = {"titan": {100: "worker:0", 101: "worker:0", 102: "worker:1"}}
    masks = {"titan": {"worker:0": "0", "worker:1": "1,3"}}
    owners = map_owners(snaps, pids, masks, users={"titan": {200: "bob"}})
    by_index = {o.gpu_index: o for o in owners.values()}
    assert (by_index[0].kind, by_index[0].tasks, by_index[0].label) == \
        ("task", ("worker:0",), "worker:0")
    assert by_index[1].kind == "foreign"
    assert by_index[1].label == "foreign pid 200 user bob"
    assert by_index[1].planned == ("worker:1",)
    assert (by_index[2].kind, by_index[2].label) == ("idle", "idle")
    assert by_index[3].kind == "shared"
    assert by_index[3].label == "worker:1 + foreign pid 300"
    lookup = owner_lookup(owners)
    assert lookup("titan", UUIDS[0]) == "worker:0"
    assert lookup("titan", "GPU-unknown") == "unknown"


def test_owner_keys_are_host_and_uuid() -> None:
    snaps = {"a": snap("a", [gpu(0)], [proc(0, 7)]), "b": snap("b", [gpu(0)], [proc(0, 7)])}
    owners = map_owners(snaps, {"a": {7: "worker:0"}})
    assert owners[("a", UUIDS[0])].kind == "task"
    assert owners[("b", UUIDS[0])].kind == "foreign"  # same pid, other host: not ours


def test_mask_without_process_flags_only_running_tasks_absent_from_their_gpu() -> None:
    snaps = {"titan": snap("titan", [gpu(i) for i in range(3)], [proc(0, 100), proc(2, 301)])}
    pids = {"titan": {100: "worker:0", 300: "worker:1", 301: "worker:1"}}
    masks = {"titan": {"worker:0": "0", "worker:1": "1,2", "worker:2": "2"}}
    misses = masked_gpus_without_process(snaps, pids, masks)
    assert [(m.task, m.gpu_index) for m in misses] == [("worker:1", 1)]  # worker:2 has no pids


def test_task_records_from_agent_status() -> None:
    raw = {"name": "worker:1", "state": "running", "pid": 10, "pids": [12, 10, 11],
           "cuda_visible_devices": "1", "log_size_bytes": 42, "last_lines": ["a", "step 3"],
           "uptime_s": 9.5}
    t = task_from_status("titan", raw)
    assert (t.pids, t.mask, t.log_size_bytes, t.last_line, t.type) == \
        ((10, 11, 12), "1", 42, "step 3", "worker")
    assert pids_by_host([t]) == {"titan": {10: "worker:1", 11: "worker:1", 12: "worker:1"}}
    assert masks_by_host([t, task("ps:0", "")]) == {"titan": {"worker:1": "1"}}


# -- findings ---------------------------------------------------------------------------------

def history_of(utils: dict[int, list[float]], start: float = 0.0) -> GpuHistory:
    history = GpuHistory()
    for i, values in utils.items():
        for k, value in enumerate(values):
            history.record("titan", [gpu(i, value)], start + k)
    return history


def test_seed_case_idle_gpu_while_peers_busy() -> None:
    tasks = [task(f"worker:{i}", str(i), (100 + i,)) for i in range(3)]
    tasks[2] = replace(tasks[2], state="exited", pids=())
    snaps = {"titan": snap("titan", [gpu(i) for i in range(4)])}
    history = history_of({0: [97, 95, 99, 96], 1: [93, 94, 90, 92], 2: [0, 0, 1, 0],
                          3: [0, 0, 0, 0]})
    found = idle_gpu_findings(snaps, history, tasks, now=3.0)
    assert [(f.gpu_index, f.task, f.level, f.kind) for f in found] == \
        [(2, "worker:2", WARNING, "idle_gpu")]  # GPU 3 is no task's: not a peer
    assert "worker:2 exited" in found[0].text


@pytest.mark.parametrize(("utils", "now", "why"), [
    ({0: [97, 95, 99], 1: [30, 40, 35]}, 2.0, "in between is neither idle nor busy"),
    ({0: [5, 2, 1], 1: [0, 0, 0]}, 2.0, "nobody busy: the job is not running"),
    ({0: [97, 95], 1: [0, 0]}, 1.0, "too few samples to judge"),
    ({0: [97, 95, 99], 1: [0, 0, 0]}, 100.0, "samples older than the window"),
])
def test_idle_rule_needs_evidence(utils: dict[int, list[float]], now: float, why: str) -> None:
    tasks = [task("worker:0", "0", (1,)), task("worker:1", "1", (2,))]
    snaps = {"titan": snap("titan", [gpu(0), gpu(1)])}
    assert idle_gpu_findings(snaps, history_of(utils), tasks, now) == [], why


def test_idle_thresholds_are_parameters() -> None:
    tasks = [task("worker:0", "0", (1,)), task("worker:1", "1", (2,))]
    snaps = {"titan": snap("titan", [gpu(0), gpu(1)])}
    history = history_of({0: [60, 60, 60], 1: [20, 20, 20]})
    assert idle_gpu_findings(snaps, history, tasks, 2.0) == []
    rules = FindingRules(busy_util_pct=50, idle_util_pct=25)
    assert [f.gpu_index for f in idle_gpu_findings(snaps, history, tasks, 2.0, rules)] == [1]


def test_log_that_stops_growing_is_found_after_the_threshold() -> None:
    rules = FindingRules(log_stall_s=60)
    w0 = task("worker:0", "0", (1,), log_size_bytes=100)
    ps = task("ps:0", "", (2,), log_size_bytes=10)
    marks = track_logs({}, [w0, ps], now=0.0)
    marks = track_logs(marks, [replace(w0, log_size_bytes=200), ps], now=30.0)
    assert stalled_log_findings([w0, ps], marks, 80.0, rules) == []  # grew at 30 s
    marks = track_logs(marks, [replace(w0, log_size_bytes=200), ps], now=95.0)
    found = stalled_log_findings([w0, ps], marks, 95.0, rules)
    assert [(f.task, f.kind) for f in found] == [("worker:0", "log_stalled")]  # ps never judged
    exited = replace(w0, state="exited")
    assert stalled_log_findings([exited], marks, 95.0, rules) == []


def test_log_without_size_tracks_last_line() -> None:
    t = task("worker:0", "0", (1,), last_line="step 1")
    marks = track_logs(track_logs({}, [t], 0.0), [replace(t, last_line="step 2")], 50.0)
    assert marks[("titan", "worker:0")].changed_at_s == 50.0


def test_memory_held_after_down_is_an_error() -> None:
    snaps = {"titan": snap("titan", [gpu(0), gpu(1)], [proc(1, 555, 1500.0), proc(0, 9)])}
    tasks = [task("worker:1", "1", (555,), state="stopped"), task("worker:0", "0", (9,))]
    found = memory_after_down_findings(snaps, tasks)
    assert [(f.level, f.gpu_index, f.task) for f in found] == [(ERROR, 1, "worker:1")]
    assert "pid 555 still holds 1500 MiB" in found[0].text


@pytest.mark.parametrize(("mask", "expected"), [
    ("0x0000000000000001", []), ("0x0000000000000000", []), (None, []), ("garbage", []),
    ("0x0000000000000004", [WARNING]), ("0x0000000000000041", [ERROR]),
])
def test_throttling_other_than_idle(mask: str | None, expected: list[str]) -> None:
    found = throttle_findings({"titan": snap("titan", [gpu(0, 90.0, mask)])})
    assert [f.level for f in found] == expected


def test_stream_problems_per_host() -> None:
    snaps = {"ok": snap("ok", [gpu(0)], at=99.0), "old": snap("old", [gpu(0)], at=80.0),
             "bad": snap("bad", [gpu(0)], at=99.0, error="Failed to initialize NVML"),
             "new": snap("new", [], at=None), "cpu": snap("cpu", [], at=99.0)}
    found = {f.host: (f.level, f.kind) for f in stream_findings(snaps, now=100.0)}
    assert found == {"old": (WARNING, "stream_stale"), "bad": (ERROR, "stream_error")}


def test_mask_findings_wait_for_start_up_grace() -> None:
    snaps = {"titan": snap("titan", [gpu(0), gpu(1)], [proc(0, 1)])}
    young = task("worker:1", "1", (2,), uptime_s=5.0)
    tasks = [task("worker:0", "0", (1,), uptime_s=500.0), young]
    misses = masked_gpus_without_process(snaps, pids_by_host(tasks), masks_by_host(tasks))
    assert mask_findings(misses, tasks) == []
    old = [tasks[0], replace(young, uptime_s=500.0)]
    assert [(f.task, f.gpu) for f in mask_findings(misses, old)] == [("worker:1", 1)]


def test_foreign_process_on_a_task_gpu() -> None:
    snaps = {"titan": snap("titan", [gpu(0), gpu(1)], [proc(0, 1), proc(0, 77), proc(1, 78)])}
    found = foreign_findings(snaps, [task("worker:0", "0", (1,))])
    assert [(f.gpu, f.task, "77" in f.text) for f in found] == [(0, "worker:0", True)]


def test_all_findings_errors_first_and_shaped_for_the_dashboard() -> None:
    snaps = {"titan": snap("titan", [gpu(0, 90.0, "0x0000000000000004"), gpu(1)],
                           [proc(1, 5)], at=99.0),
             "dead": snap("dead", [gpu(0)], at=10.0, error="SSH session lost")}
    tasks = [task("worker:1", "1", (5,), state="killed")]
    found = all_findings(snaps, GpuHistory(), tasks, {}, now=100.0)
    assert [f.level for f in found] == [ERROR, ERROR, WARNING]
    for f in found:  # tfctl.tui.app.sources.FindingLike
        assert isinstance(f.level, str) and isinstance(f.text, str) and f.host is not None
        assert f.gpu is None or isinstance(f.gpu, int)
