"""What a run's GPUs cost (remote/agent/energy.py, remote/history/cost.py): the trapezoid over
power samples, gaps not bridged, a GPU without power said unknown (never 0), the hold from the
tasks' masks and events, shared boards named; the host's answer (op `runs` with `energy`) and
the report's, from the same records, agree."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tfctl.remote.agent.energy import (
    ENERGY_FILE,
    ENERGY_NO_POWER,
    energy_gpu_costs,
    energy_integral,
    energy_mask_indices,
    energy_of_run,
    energy_task_spans,
    energy_union,
)
from tfctl.remote.agent.vocab import GpuCost
from tfctl.remote.history.cost import cost_from_hosts, recording_cost
from tfctl.remote.history.listing import merge_runs
from tfctl.remote.history.records import RUN_FOLDER, read_run

STEADY = [(float(t), 200.0) for t in range(11)]  # 200 W, one sample a second for 10 s


@pytest.mark.parametrize(("points", "spans", "joules", "covered_s", "unsampled_s"), [
    # steady power over the samples' span: 200 W × 10 s
    (STEADY, [(0.0, 10.0)], 2000.0, 10.0, 0.0),
    # a ramp: the trapezoid, not the left or right sum
    ([(0.0, 100.0), (1.0, 300.0)], [(0.0, 1.0)], 200.0, 1.0, 0.0),
    # part of the span between two samples: the line between them, clipped
    ([(0.0, 0.0), (2.0, 100.0)], [(0.5, 1.5)], 50.0, 1.0, 0.0),
    # the hold's edges a few seconds from the first and last sample: flat to the edge
    (STEADY, [(-3.0, 13.0)], 3200.0, 16.0, 0.0),
    # edges farther than the longest bridged gap (5 s): not covered, said
    (STEADY, [(-10.0, 20.0)], 2000.0, 10.0, 20.0),
    # a gap of 19 s between samples: not bridged
    ([(0.0, 100.0), (1.0, 100.0), (20.0, 100.0), (21.0, 100.0)], [(0.0, 21.0)], 200.0, 2.0,
     19.0),
    # a gap of 4 s (a few lost samples): bridged by the line
    ([(0.0, 100.0), (4.0, 300.0)], [(0.0, 4.0)], 800.0, 4.0, 0.0),
    # samples whose power is missing ([N/A]) are left out; the others are bridged around them
    ([(0.0, 100.0), (1.0, None), (2.0, 100.0)], [(0.0, 2.0)], 200.0, 2.0, 0.0),
    # two samples in the same whole second (gpu.csv's resolution): no width, no harm
    ([(0.0, 100.0), (1.0, 100.0), (1.0, 100.0), (3.0, 100.0)], [(0.0, 3.0)], 300.0, 3.0, 0.0),
    # a span with no sample inside, between two close ones: the line between them
    ([(0.0, 100.0), (4.0, 100.0)], [(1.0, 2.0)], 100.0, 1.0, 0.0),
    # two disjoint spans
    (STEADY, [(0.0, 2.0), (5.0, 6.0)], 600.0, 3.0, 0.0),
])
def test_power_is_integrated_with_the_trapezoid_and_long_gaps_are_not_bridged(
        points: list[tuple[float, float | None]], spans: list[tuple[float, float]],
        joules: float, covered_s: float, unsampled_s: float) -> None:
    got = energy_integral(points, spans)
    assert got == pytest.approx((joules, covered_s, unsampled_s))


@pytest.mark.parametrize("points", [[], [(0.0, None), (1.0, None)]])
def test_no_power_reading_is_no_energy_not_zero(points: list[tuple[float, float | None]]) -> None:
    assert energy_integral(points, [(0.0, 1.0)]) == (None, 0.0, 1.0)


def test_a_tasks_hold_runs_from_its_first_start_to_its_last_exit_restarts_included() -> None:
    events = [("worker:0", "start", 10.0), ("worker:0", "exit", 20.0),
              ("worker:0", "restart", 25.0), ("worker:0", "stopped", 40.0),
              ("worker:1", "start", 12.0), ("ps:0", "exit", 5.0)]
    assert energy_task_spans(events, end_s=99.0) == {"worker:0": (10.0, 40.0),
                                                     "worker:1": (12.0, 99.0)}
    assert energy_union([(5.0, 7.0), (0.0, 2.0), (1.0, 3.0), (3.0, 4.0), (9.0, 9.0)]) == [
        (0.0, 4.0), (5.0, 7.0)]


@pytest.mark.parametrize(("mask", "indices"), [
    ("0,2", [0, 2]), ("", []), ("-1", []), ("1,-1,2", [1]), ("GPU-bbb", [1]),
    ("GPU-b", [1]), ("GPU-", []), ("7", []), ("MIG-1234", []), ("2, 2", [2]),
])
def test_a_mask_names_gpus_by_index_or_uuid_as_cuda_reads_it(mask: str, indices: list[int]
                                                              ) -> None:
    gpus = [(0, "GPU-aaa"), (1, "GPU-bbb"), (2, "GPU-ccc")]
    assert energy_mask_indices(mask, gpus) == indices


GPUS = [(0, "GPU-a", "TITAN X"), (1, "GPU-b", "GTX 970")]


def _costs(samples: dict[int, list[tuple[float, float | None]]], masks: dict[str, str],
           owners: list[tuple[float, int | None, str]] | None = None,
           unsampled: str | None = None) -> list[GpuCost]:
    spans = {task: (0.0, 10.0) for task in masks}
    return energy_gpu_costs(masks, spans, GPUS, samples, owners or [], unsampled)


def test_each_gpu_held_has_its_hours_and_energy_and_a_gpu_without_power_says_so() -> None:
    """Mixed: GPU 0 reports power, GPU 1 (an older GeForce) does not."""
    costs = _costs({0: STEADY, 1: [(float(t), None) for t in range(11)]},
                   {"worker:0": "0", "worker:1": "1", "ps:0": ""})
    assert [(c.index, c.name, c.held_s, c.energy_wh, c.energy_unknown, c.unsampled_s)
            for c in costs] == [(0, "TITAN X", 10.0, round(2000 / 3600, 4), None, 0.0),
                                (1, "GTX 970", 10.0, None, ENERGY_NO_POWER, None)]
    run = cost_from_hosts({"h1": costs})
    assert run.gpu_hours == round(20 / 3600, 4) and run.energy_wh == round(2000 / 3600, 4)
    assert run.lower_bound and run.energy_text() == "≥0.56 Wh"
    assert run.energy_note() == "energy is a lower bound: power not reported: h1 GPU 1"


def test_a_run_whose_gpus_report_no_power_has_no_energy_and_says_why() -> None:
    run = cost_from_hosts({"h1": _costs({1: [(0.0, None), (10.0, None)]}, {"worker:0": "1"})})
    assert run.energy_wh is None and run.energy_text() == "unknown" and not run.lower_bound
    assert run.energy_note() == "energy unknown (power not reported: h1 GPU 1)"
    assert run.to_json()["energy_wh"] is None and run.to_json()["gpu_hours"] == round(
        10 / 3600, 4)
    (gpu,) = run.to_json()["gpu_costs"]
    assert (gpu["energy_wh"], gpu["energy_unknown"]) == (None, "power not reported")


def test_a_host_without_samples_and_a_gpu_without_a_reading_while_held_are_unknown() -> None:
    (none,) = _costs({}, {"worker:0": "0"}, unsampled="No devices were found")
    assert none.energy_unknown == "no GPU samples: No devices were found"
    (before,) = _costs({0: [(50.0, 100.0), (51.0, 100.0)]}, {"worker:0": "0"})
    assert before.energy_wh is None
    assert before.energy_unknown == "no power reading while the run held it"


def test_a_gpu_another_process_used_while_held_is_named_shared() -> None:
    owners = [(3.0, 0, "worker:0"), (4.0, 0, "foreign:bob"), (5.0, 1, "run:r9:worker:0"),
              (60.0, 0, "foreign:carol")]  # carol came after the run
    costs = _costs({0: STEADY, 1: STEADY}, {"worker:0": "0"}, owners)
    assert [(c.index, c.shared_with) for c in costs] == [(0, ("foreign:bob",))]
    assert cost_from_hosts({"h1": costs}).energy_note() == \
        "h1 GPU 0 was shared with foreign:bob: its energy includes theirs"


def test_a_run_without_gpus_and_a_host_that_did_not_say() -> None:
    cpu_only = cost_from_hosts({"h1": []})
    assert (cpu_only.gpu_hours, cpu_only.energy_wh) == (0.0, None)
    assert cpu_only.energy_note() == "energy unknown (the run held no GPU)"
    older = cost_from_hosts({"h1": _costs({0: STEADY}, {"worker:0": "0"}), "h2": None})
    assert older.lower_bound and older.energy_note() == "energy is a lower bound: h2 did not say"
    silent = cost_from_hosts({"h2": None})
    assert (silent.gpu_hours, silent.energy_wh) == (None, None)


def test_runs_joins_each_hosts_costs() -> None:
    h1 = GpuCost(0, "TITAN X", 3600.0, 200.0, None, 0.0).to_wire()
    h2 = GpuCost(1, "GTX 970", 1800.0, None, "power not reported").to_wire()
    (run,) = merge_runs({"h1": [{"run_id": "r", "created_at": 1.0, "gpu_costs": [h1]}],
                         "h2": [{"run_id": "r", "created_at": 1.0, "gpu_costs": [h2]}]}, {})
    out = run.to_json()
    assert (out["gpu_hours"], out["energy_wh"], out["energy_lower_bound"]) == (1.5, 200.0, True)
    assert [(g["host"], g["index"], g["gpu_hours"]) for g in out["gpu_costs"]] == [
        ("h1", 0, 1.0), ("h2", 1, 0.5)]


# ---------------------------------------------------------------- from the files, both sides

def _run_folder(folder: Path, *, power: str = "212.5", gap: range = range(0),
                worker: str = "worker:0") -> None:
    """A host's run folder: `worker` on GPU 1 (by UUID) from 1002 to 1012, samples from 1000,
    GPU 0 idle and not the run's; `gap`: seconds without a sample."""
    folder.mkdir(parents=True)
    (folder / "manifest.json").write_text(json.dumps({"created_at": 1000.0, "tasks": [
        {"name": worker, "cuda_visible_devices": "GPU-b"},
        {"name": f"ps:{worker}", "cuda_visible_devices": ""}]}))
    (folder / "gpus.json").write_text(json.dumps({"started_at": 1000.0, "gpus": [
        {"index": "0", "uuid": "GPU-a", "name": "A"}, {"index": "1", "uuid": "GPU-b",
                                                      "name": "B"}]}))
    (folder / "gpu.csv").write_text("".join(
        f"{t},{i},90,1500,70,{power if i == 1 else '30.00'},0x0\n"
        for t in range(15) if t not in gap for i in (0, 1)))
    (folder / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in (
        {"t": 1001.5, "task": f"ps:{worker}", "event": "start"},
        {"t": 1002.0, "task": worker, "event": "start"},
        {"t": 1012.0, "task": worker, "event": "exit", "exit_code": 0},
        {"t": 1012.5, "task": f"ps:{worker}", "event": "stopped"},
        {"t": 1012.6, "event": "end", "cause": f"{worker} ended"})))
    (folder / "owners.csv").write_text(f"5,1,4242,1500,{worker}\n")


@pytest.mark.parametrize(("power", "gap", "wh", "unknown", "unsampled_s"), [
    ("212.5", range(0), round(212.5 * 10 / 3600, 4), None, 0.0),
    ("[N/A]", range(0), None, ENERGY_NO_POWER, None),
    ("", range(0), None, ENERGY_NO_POWER, None),
    # held 2..12, no sample from 4 to 10: 3..11 is 8 s, not bridged; 2..3 and 11..12 are
    ("212.5", range(4, 11), round(212.5 * 2 / 3600, 4), None, 8.0),
])
def test_the_host_and_the_report_find_the_same_cost_in_the_same_records(
        tmp_path: Path, power: str, gap: range, wh: float | None, unknown: str | None,
        unsampled_s: float | None) -> None:
    root = tmp_path / "runs" / "r1"
    folder = root / "h1" / RUN_FOLDER
    _run_folder(folder, power=power, gap=gap)
    (host,) = energy_of_run(str(folder), live=False)
    assert (host.index, host.held_s, host.energy_wh, host.energy_unknown,
            host.unsampled_s) == (1, 10.0, wh, unknown, unsampled_s)
    reported = recording_cost(read_run(str(root), "r1"))
    assert [(g.host, g.cost) for g in reported.gpus] == [("h1", host)]


def test_the_host_keeps_a_finished_runs_cost_and_computes_it_again_when_its_records_change(
        tmp_path: Path) -> None:
    folder = tmp_path / "run"
    _run_folder(folder)
    (first,) = energy_of_run(str(folder), live=False)
    kept = json.loads((folder / ENERGY_FILE).read_text())
    assert kept["gpus"] == [first.to_wire()]
    (folder / ENERGY_FILE).write_text(json.dumps(dict(kept, gpus=[
        dict(first.to_wire(), energy_wh=1.0)])))
    assert energy_of_run(str(folder), live=False)[0].energy_wh == 1.0  # read, not computed
    with open(folder / "gpu.csv", "a") as more:
        more.write("15,1,90,1500,70,212.5,0x0\n")
    os.utime(folder / "gpu.csv", (2e9, 2e9))
    assert energy_of_run(str(folder), live=False)[0].energy_wh == first.energy_wh
    (folder / ENERGY_FILE).unlink()
    assert energy_of_run(str(folder), live=True) == [first]  # a live run's is not kept
    assert not (folder / ENERGY_FILE).exists()
