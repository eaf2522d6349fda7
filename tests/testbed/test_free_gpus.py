"""`gpus: free` on the lab: a 4-GPU box whose GPU 0 a colleague holds runs its workers on 1-3.

GPUs come from the test-only nvidia-smi stand-in (tests/support/fakes): a process counts as a GPU
user when its CUDA_VISIBLE_DEVICES names the GPU, so a `sleep` with a mask plays a colleague's job.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.support.testbed.testbed import Testbed
from tests.support.testbedtools import FOREVER, job_dir, processes_of_run, tfctl


@pytest.fixture
def box(testbed: Testbed) -> Iterator[Testbed]:
    """h1 with four stand-in GPUs."""
    testbed.standin_gpus("h1", 4)
    yield testbed
    testbed.remove_from_path("h1", "nvidia-smi")


def test_free_gpus_are_planned_now_and_taken_at_up(box: Testbed, tmp_path: Path,
                                                    stranger: Callable[..., int]) -> None:
    colleague = stranger("h1", 0)
    inv = box.write_inventory(job_dir(tmp_path) / "cluster.yaml", FOREVER, hosts=["h1"],
                              ps={"h1": 1}, host_fields={"h1": {"gpus": "free"}})
    greedy = box.write_inventory(tmp_path / "greedy" / "cluster.yaml", FOREVER, hosts=["h1"],
                                 ps={"h1": 0}, host_fields={"h1": {"gpus": {"free": 4}}},
                                 name="greedy")
    try:
        offline = tfctl(inv, "plan")
        assert offline.returncode == 0, offline.stderr
        assert "h1: free GPUs, chosen at up" in offline.stdout

        now = tfctl(inv, "plan", "--now", "--json")
        assert now.returncode == 0, now.stderr
        data = json.loads(now.stdout)
        assert data["free_gpus"]["h1"]["now"] == [1, 2, 3]
        assert [t["cuda_visible_devices"] for t in data["tasks"] if t["type"] == "worker"] == [
            "1", "2", "3"]
        assert any(f"pid {colleague} sleep 300" in w for w in data["free_gpus"]["h1"]["taken"])
        said = tfctl(inv, "plan", "--now")
        assert "h1: GPUs 1, 2, 3 free now; GPU 0: held by" in said.stdout, said.stdout

        checked = json.loads(tfctl(inv, "check", "--json").stdout)["hosts"][0]["findings"]
        assert {"level": "ok", "text": "`gpus: free`: up would take GPUs 1, 2, 3 now"} in checked
        assert not [f for f in checked if "is using a GPU" in f["text"]], checked  # not GPU 0
        short = json.loads(tfctl(greedy, "check", "--json").stdout)["hosts"][0]["findings"]
        assert any(f["level"] == "fail" and "wants 4 free GPUs, free now: 1, 2, 3" in f["text"]
                   for f in short), short

        refused = tfctl(greedy, "up")
        assert refused.returncode == 1, refused.stdout + refused.stderr
        assert "h1: `gpus: free` wants 4 free GPUs, free now: 1, 2, 3" in refused.stderr
        assert "Traceback" not in refused.stderr

        up = tfctl(inv, "up", "--json")
        assert up.returncode == 0, up.stdout + up.stderr
        started = json.loads(up.stdout)
        assert started["gpus_taken"] == {"h1": [1, 2, 3]}
        masks = {env["TFCTL_TASK"]: env["CUDA_VISIBLE_DEVICES"]
                 for env in processes_of_run(started["run_id"]).values()}
        assert masks == {"ps:0": "", "worker:0": "1", "worker:1": "2", "worker:2": "3"}
        # the run records which it took: its claim names GPUs 1-3 for other users to read
        claims = list((box.claims_dir("h1")).glob(f"*.run.{started['run_id']}.json"))
        assert len(claims) == 1 and json.loads(claims[0].read_text())["gpus"] == [1, 2, 3]
        # now nothing is free there: the plan says so rather than guessing
        full = json.loads(tfctl(inv, "plan", "--now", "--json").stdout)["free_gpus"]["h1"]
        assert full["now"] is None and full["error"] == "free: []"
    finally:
        tfctl(inv, "down", "--grace", "1")
