"""`tfctl plan` of a torch and a jax job (the bundled examples/torch-ddp.yaml and jax.yaml): the
table says the framework, the variables every rank shares once and each rank's own in a column;
`--json` has the framework and every variable in each task's env."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

EXAMPLES = Path(__file__).parents[2] / "examples"


def plan(example: str, *more: str) -> str:
    run = subprocess.run([sys.executable, "-m", "tfctl.tui", "-i", str(EXAMPLES / example),
                          "plan", *more], capture_output=True, text=True, timeout=60,
                         env={**os.environ, "COLUMNS": "200"})
    assert run.returncode == 0, run.stderr
    return run.stdout


def test_a_torch_plan_shows_each_ranks_variables() -> None:
    table = plan("torch-ddp.yaml")
    assert table.splitlines()[0] == "ddp · PyTorch · 2 hosts · 5 tasks"
    assert "WORLD_SIZE=5 MASTER_ADDR=192.168.0.80 MASTER_PORT=2223" in table
    rows = [line for line in table.splitlines() if line.startswith("worker:")]
    assert "RANK=3 LOCAL_RANK=3 GROUP_RANK=0" in rows[3] and "0,1,2,3" in rows[3]
    assert "RANK=4 LOCAL_RANK=0 GROUP_RANK=1" in rows[4]
    data = json.loads(plan("torch-ddp.yaml", "--json"))
    assert data["framework"] == "torch" and data["cluster"] == {"coordinator": [
        "192.168.0.80:2223"]}
    assert data["tasks"][4]["env"]["LOCAL_WORLD_SIZE"] == "1"


def test_a_jax_plan_shows_each_process_and_keras_variables() -> None:
    table = plan("jax.yaml")
    assert table.splitlines()[0] == "jax · JAX · 2 hosts · 2 tasks"
    assert "JAX_NUM_PROCESSES=2 JAX_COORDINATOR_ADDRESS=192.168.0.80:2223" in table
    env = json.loads(plan("jax.yaml", "--json"))["tasks"][1]["env"]
    assert env["KERAS_DISTRIBUTION_JOB_ADDRESSES"] == "192.168.0.80:2223,192.168.0.20:2223"
    assert (env["KERAS_DISTRIBUTION_PROCESS_ID"], env["JAX_PROCESS_ID"]) == ("1", "1")
