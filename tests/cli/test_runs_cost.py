"""`tfctl runs` and `tfctl report` give a run's cost (GPU-hours and energy) in their text and
`--json`, here for a run that held no GPU (`transport: local`, no nvidia-smi): 0 GPU-hours, and
its energy unknown with why, never 0. The energy of GPUs that report power (and of one that
does not) is tests/testbed/test_energy.py's, on the stand-in."""

from __future__ import annotations

import json
from pathlib import Path

from tests.support.localcluster import local_cluster, run_tfctl


def test_a_run_without_gpus_costs_no_gpu_hours_and_no_energy_is_claimed(tmp_path: Path) -> None:
    inv = local_cluster(tmp_path, {"a": {"ps": 1}}, job={"args": ["--steps=3"]})
    up = run_tfctl(inv, "up", "--wait", "--json", timeout=120)
    assert up.returncode == 0, up.stderr
    run_id = json.loads(up.stdout)["run_id"]

    listed = run_tfctl(inv, "runs", "--json")
    assert listed.returncode == 0, listed.stderr
    (run,) = [r for r in json.loads(listed.stdout)["runs"] if r["run_id"] == run_id]
    assert (run["gpu_hours"], run["energy_wh"], run["gpu_costs"]) == (0.0, None, [])
    assert run["energy_note"] == "energy unknown (the run held no GPU)"
    table = run_tfctl(inv, "runs").stdout
    line = next(line for line in table.splitlines() if line.startswith(run_id))
    assert "0.0000 GPU-h" in line and "unknown" in line and " Wh" not in table

    report = run_tfctl(inv, "report", "--json", "-o", str(tmp_path / "report"))
    assert report.returncode == 0, report.stderr
    cost = json.loads(report.stdout)
    assert (cost["run_id"], cost["gpu_hours"], cost["energy_wh"]) == (run_id, 0.0, None)
    assert cost["energy_note"] == run["energy_note"] and Path(cost["page"]).is_file()
    text = run_tfctl(inv, "report", "-o", str(tmp_path / "report")).stdout
    assert "cost: 0.0000 GPU-hours held, energy unknown (the run held no GPU)" in text
