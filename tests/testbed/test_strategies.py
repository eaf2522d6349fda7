"""Jobs TensorFlow runs without a cluster port: single-process MirroredStrategy on the lab.

A `strategy: mirrored` task opens no port: `up` counts it as started once it has run a few
seconds without exiting (not after the whole port wait, `--start-timeout`), and a task that
dies at once still fails the start, with its own words.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from tests.support.testbedtools import examples_job_dir, processes_of_run, run_id_from, tfctl

pytestmark = [pytest.mark.testbed, pytest.mark.tf]

EXAMPLES = Path(__file__).parents[2] / "examples"
MIRRORED = ["--strategy=mirrored", "--cpu_devices=2", "--log_every=10"]



def test_single_process_mirrored_trains_without_a_port(testbed, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    job = {"script": "train.py", "strategy": "mirrored", "args": [*MIRRORED, "--steps=30"]}
    inv = testbed.write_inventory(examples_job_dir(tmp_path) / "cluster.yaml", job, hosts=["h1"],
                              ps={"h1": 0})
    (task,) = json.loads(tfctl(inv, "plan", "--json").stdout)["tasks"]
    assert task["port"] is None and "TF_CONFIG" not in task["env"]
    started = time.monotonic()
    up = tfctl(inv, "up", timeout=300)
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        assert time.monotonic() - started < 60  # not the port wait's 180 s
        run_id = run_id_from(up.stdout)
        wait = tfctl(inv, "wait", "--timeout", "240", timeout=300)
        logs = tfctl(inv, "logs", "-n", "100").stdout
        assert wait.returncode == 0, wait.stderr + logs
        assert "mirrored over 2 devices training 30 steps" in logs
        assert '"style": "mirrored"' in logs
        assert processes_of_run(run_id) == {}
        assert list((testbed.host("h1").workdir / "out" / "ckpt").glob("ckpt-30.index"))
        # The run comes home: outputs and logs, into runs/<run-id>/<host>/ beside the inventory.
        collect = tfctl(inv, "collect")
        assert collect.returncode == 0, collect.stdout + collect.stderr
        home = inv.parent / "runs" / run_id / "h1"
        assert (home / "out" / "ckpt" / "ckpt-30.index").is_file()
        assert "RESULT" in (home / "tfctl-run" / "worker-0.log").read_text()
        assert f"h1: 0 files → {home}" in tfctl(inv, "collect", "--run", run_id).stdout
    finally:
        tfctl(inv, "down", "--grace", "1")


def test_a_portless_task_that_dies_at_once_fails_the_start(testbed, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    job = {"script": "trian.py", "strategy": "mirrored", "args": MIRRORED}  # a typo
    inv = testbed.write_inventory(examples_job_dir(tmp_path) / "cluster.yaml", job, hosts=["h1"],
                              ps={"h1": 0})
    up = tfctl(inv, "up", timeout=300)
    assert up.returncode == 1, up.stdout + up.stderr
    assert "worker:0" in up.stderr and "can't open file" in up.stderr
