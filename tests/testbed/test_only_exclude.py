"""`tfctl up --exclude` on the real SSH lab: the run lives on the other hosts only, `status`
reads them, and `down` (with the whole inventory) stops exactly what was started."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.testbed.testbed import Testbed
from tests.support.testbedtools import (
    FOREVER,
    job_dir,
    processes_of_run,
    run_id_from,
    status_json,
    tfctl,
)
from tfctl.remote.runs.current import state_file

pytestmark = pytest.mark.testbed


def test_up_exclude_runs_on_the_rest_and_down_stops_it(testbed: Testbed, tmp_path: Path,
                                                       down_after: list[Path]) -> None:
    inv = testbed.write_inventory(
        job_dir(tmp_path) / "cluster.yaml", FOREVER, ps={"h2": 0, "h3": 0}
    )
    down_after.append(inv)
    up = tfctl(inv, "up", "--exclude", "h2")
    assert up.returncode == 0, up.stdout + up.stderr
    run_id = run_id_from(up.stdout)
    status = status_json(inv)
    placed = {t["name"]: t["host"] for t in status["tasks"]}
    assert placed == {"ps:0": "h1", "worker:0": "h1", "worker:1": "h3"}
    assert all(t["state"] == "running" for t in status["tasks"])
    assert {env["TFCTL_TASK"] for env in processes_of_run(run_id).values()} == set(placed)
    runs_on_h2 = Path(testbed.host("h2").workdir) / ".tfctl" / "runs"  # the lab shares one disk
    assert not runs_on_h2.exists() or run_id not in [p.name for p in runs_on_h2.iterdir()]
    state = json.loads(Path(state_file(str(inv), "lab")).read_text())
    assert state["hosts"] == ["h1", "h3"]

    down = tfctl(inv, "down", "--grace", "1", "--json")
    assert down.returncode == 0, down.stderr
    summary = json.loads(down.stdout)
    assert summary["run_id"] == run_id and summary["clean"]
    assert sorted(summary["stopped"]) == sorted(placed)
    assert processes_of_run(run_id) == {}
