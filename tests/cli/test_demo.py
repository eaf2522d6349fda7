"""`tfctl demo --no-ui`: a real local cluster trains the bundled example, then is gone."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.testbedtools import processes_of_run
from tfctl.remote.runs.current import state_file
from tfctl.remote.runs.notices import FOLDED, is_notice

pytestmark = pytest.mark.tf


def test_demo_runs_to_completion_and_leaves_nothing(tmp_path: Path) -> None:
    demo_dir = tmp_path / "demo"
    proc = subprocess.run([sys.executable, "-m", "tfctl.tui", "demo", "--no-ui", "--steps", "30",
                           "--dir", str(demo_dir)], capture_output=True, text=True, timeout=300,
                          cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    # the classic async flags style may overshoot the last step by one or two
    steps = re.search(r"result: (\d+) steps, loss [\d.]+, accuracy [\d.]+", proc.stdout)
    assert steps and 30 <= int(steps.group(1)) <= 33, proc.stdout[-2000:]
    assert list((demo_dir / "out" / "ckpt").glob("ckpt-*.index")), "no checkpoint written"
    assert list((demo_dir / "out").rglob("events.out.tfevents.*")), "no TensorBoard events"
    # the start-up notices of TensorFlow and TensorBoard folded: one line per task at most
    followed = [line.split(" | ", 1)[-1] for line in proc.stdout.splitlines()]
    assert not [line for line in followed if is_notice(line)], proc.stdout[-3000:]
    assert followed.count(FOLDED) <= 4, proc.stdout[-3000:]
    state = json.loads(Path(state_file(str(demo_dir / "cluster.yaml"), "demo")).read_text())
    assert processes_of_run(state["run_id"]) == {}
    # nothing written outside the demo folder
    assert sorted(p.name for p in tmp_path.iterdir()) == ["demo"]
    # the inventory it wrote is an ordinary one: `tfctl plan` reads it
    plan = subprocess.run([sys.executable, "-m", "tfctl.tui", "-i", str(demo_dir / "cluster.yaml"),
                           "plan", "--json"], capture_output=True, text=True, check=True)
    tasks = [t["name"] for t in json.loads(plan.stdout)["tasks"]]
    assert tasks[:3] == ["ps:0", "worker:0", "worker:1"]
