"""MultiWorkerMirrored workers restart together and resume, with real TensorFlow on the lab.

A MultiWorkerMirrored worker cannot rejoin a running group. With `restart: {worker:
on-failure}` (and `together`, the default under this strategy) a killed worker's supervisor
waits until its peer has failed too; both restart, each restores its latest checkpoint (the
same step on both), and the job ends at its planned step. The worker is killed between two
checkpoints (one taken, the next 150 steps away), so the restart resumes from a step both
workers saved.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import time
from pathlib import Path

import pytest

from tests.support.testbedtools import processes_of_run, run_id_from, task_pid, tfctl

pytestmark = [pytest.mark.testbed, pytest.mark.tf]

EXAMPLES = Path(__file__).parents[2] / "examples"
STEPS = 600
CHECKPOINT_EVERY = 200
LOG_EVERY = 50



def test_killed_worker_and_its_peer_restart_together_and_resume(testbed, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    job_dir = tmp_path / "job"
    job_dir.mkdir()
    for name in ("train.py", "digits.py"):
        shutil.copy(EXAMPLES / name, job_dir / name)
    job = {"script": "train.py", "strategy": "multi_worker_mirrored",
           "args": [f"--steps={STEPS}", f"--log_every={LOG_EVERY}",
                    f"--checkpoint_every={CHECKPOINT_EVERY}"],
           "restart": {"worker": "on-failure", "max": 2, "backoff": 1}}
    inv = testbed.write_inventory(job_dir / "cluster.yaml", job, hosts=["h1", "h2"],
                              ps={"h1": 0, "h2": 0})
    up = tfctl(inv, "up", timeout=300)
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        run_id = run_id_from(up.stdout)
        runs = ".tfctl/runs/" + run_id
        log1 = testbed.host("h2").workdir / runs / "worker-1.log"
        deadline = time.monotonic() + 120
        while not [s for s in re.findall(r"^step (\d+) ", log1.read_text(), re.M)
                   if int(s) > CHECKPOINT_EVERY]:  # past the first checkpoint
            assert time.monotonic() < deadline, log1.read_text()[-2000:]
            time.sleep(0.2)
        victim = task_pid(run_id, "worker:1")
        assert victim is not None
        os.kill(victim, signal.SIGKILL)
        wait = tfctl(inv, "wait", "--timeout", "280", timeout=300)
        log0 = (testbed.host("h1").workdir / runs / "worker-0.log").read_text()
        assert wait.returncode == 0, wait.stderr + log0[-3000:] + log1.read_text()[-3000:]
        assert "to restart together" in log1.read_text()
        said = [line for line in log1.read_text().splitlines() if line.startswith("==> tfctl")]
        print("\n".join(said))  # how the restart went, for whoever reads `pytest -s`
        assert any("down after" in line or "restarting anyway" in line for line in said)
        resumed = [re.findall(r"^resumed from .* at global step (\d+)$", log, re.M)
                   for log in (log0, log1.read_text())]
        assert resumed[0] == resumed[1] and len(resumed[0]) == 1, resumed  # the same step
        assert int(resumed[0][0]) >= CHECKPOINT_EVERY, resumed
        assert f'"steps": {STEPS}' in log0  # RESULT: the planned step was reached
        assert processes_of_run(run_id) == {}
    finally:
        tfctl(inv, "down", "--grace", "1")
