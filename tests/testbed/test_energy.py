"""What a run cost, on the testbed: GPU-hours and energy in `tfctl runs` and `tfctl report`.

h1 has two stand-in GPUs (tests/support/fakes/nvidia_smi_standin.py): GPU 0 reports
`power.draw` (85 % of its 250 W limit while a process holds it: 212.5 W), GPU 1 is an older
GeForce that answers `[Not Supported]`. A light job's worker:0 holds GPU 0 and worker:1 GPU 1
(the ps none). After the hosts ended the run, `runs --json` (the host's own sums, agent op
`runs`) and `report --json` (the same from the records brought home) agree: GPU 0 drew close to
212.5 W × the time it was held, GPU 1's energy is unknown because its power is not reported (never
0), and the run's energy is said to be a lower bound, with why.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.support.testbed.testbed import Testbed
from tests.support.testbedtools import Up, job_dir, processes_of_run, tfctl

JOB = {"script": "job.py", "style": "flags", "args": ["--steps=20"]}  # ~4 s
BUSY_W = 0.85 * 250  # the stand-in's power.draw of a GPU a process holds


@pytest.fixture
def power_testbed(testbed: Testbed) -> Iterator[Testbed]:
    testbed.standin_gpus("h1", 2, gpus=[{}, {"name": "NVIDIA GeForce GTX 970", "power": None}])
    yield testbed
    testbed.remove_from_path("h1", "nvidia-smi")


def _recorded(run_dir: Path) -> bool:
    """The run ended on h1 and its watcher, which records it, is gone."""
    if not (run_dir / "finished.json").exists():
        return False
    try:
        pid = json.loads((run_dir / "keeper.pid.json").read_text())["pid"]
        return "zombie" in Path(f"/proc/{pid}/status").read_text(errors="replace")
    except (OSError, ValueError, KeyError):
        return True


def test_runs_and_report_give_each_gpus_hours_and_energy_or_why_not(
        power_testbed: Testbed, tmp_path: Path, up_run: Callable[..., Up]) -> None:
    inv = power_testbed.write_inventory(job_dir(tmp_path) / "cluster.yaml", JOB, hosts=["h1"],
                                        gpus={"h1": [0, 1]}, ps={"h1": 1})
    run_id = up_run(inv).run_id
    run_dir = power_testbed.host("h1").workdir / ".tfctl" / "runs" / run_id
    deadline = time.monotonic() + 90
    while processes_of_run(run_id) or not _recorded(run_dir):
        assert time.monotonic() < deadline, processes_of_run(run_id)
        time.sleep(0.5)
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    worker = [e for e in events if e.get("task") == "worker:0"]
    start = min(e["t"] for e in worker if e["event"] == "start")
    end = max(e["t"] for e in worker if e["event"] in ("exit", "stopped"))

    listed = tfctl(inv, "runs", "--json")
    assert listed.returncode == 0, listed.stdout + listed.stderr
    (run,) = [r for r in json.loads(listed.stdout)["runs"] if r["run_id"] == run_id]
    gpu0, gpu1 = run["gpu_costs"]
    assert (gpu0["host"], gpu0["index"], gpu1["index"]) == ("h1", 0, 1)
    held = gpu0["held_s"]
    assert held == pytest.approx(end - start, abs=0.1)
    assert held >= 3  # 20 steps of 0.2 s
    assert gpu0["energy_wh"] > 0 and gpu0["energy_unknown"] is None
    watts = gpu0["energy_wh"] * 3600 / held
    assert 0.7 * BUSY_W <= watts <= 1.01 * BUSY_W, (watts, gpu0)
    assert (gpu1["energy_wh"], gpu1["energy_unknown"]) == (None, "power not reported")
    assert gpu1["held_s"] > 0 and gpu1["name"] == "NVIDIA GeForce GTX 970"
    assert run["energy_wh"] == gpu0["energy_wh"] and run["energy_lower_bound"] is True
    assert "power not reported: h1 GPU 1" in run["energy_note"]
    assert run["gpu_hours"] == pytest.approx((gpu0["held_s"] + gpu1["held_s"]) / 3600, abs=1e-4)

    table = tfctl(inv, "runs")
    assert f"≥{gpu0['energy_wh']:.2f} Wh" in table.stdout, table.stdout
    assert "energy is a lower bound: power not reported: h1 GPU 1" in table.stdout

    out = tmp_path / "report"
    reported = tfctl(inv, "report", "-o", str(out), "--json")
    assert reported.returncode == 0, reported.stdout + reported.stderr
    cost = json.loads(reported.stdout)
    assert cost["gpu_costs"] == run["gpu_costs"]  # the host's sums and the report's agree
    assert (cost["energy_wh"], cost["gpu_hours"]) == (run["energy_wh"], run["gpu_hours"])
    page = (out / "report.html").read_text()
    assert "What each GPU cost" in page and "power not reported: h1 GPU 1" in page
    assert f"{gpu0['energy_wh']:.2f} Wh" in page and "whole board" in page
    text = tfctl(inv, "report", "-o", str(out))
    assert f"GPU-hours held, energy ≥{gpu0['energy_wh']:.2f} Wh" in text.stdout, text.stdout
