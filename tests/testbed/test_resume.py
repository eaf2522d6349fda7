"""Restarts that resume, with real TensorFlow on the lab: kill -9 a worker mid-run.

Between-graph (flags) training with `restart: {worker: on-failure}`: the killed worker is
started again by its host's supervisor, rejoins, and training goes on from the parameter
servers' global step; the job still ends at its planned step and the step never goes back.
Worker 0 (the chief) is held (SIGSTOP) from just before the kill until the restarted worker
has logged a step, so the rejoin happens mid-run however long its TensorFlow import takes,
and the job needs only a few thousand steps.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest

from tests.support.testbedtools import processes_of_run, run_id_from, task_pid, tfctl

pytestmark = [pytest.mark.testbed, pytest.mark.tf]

EXAMPLES = Path(__file__).parents[2] / "examples"
STEPS = 2000
T = TypeVar("T")


def _until(probe: Callable[[], T | None], timeout_s: float, what: str) -> T:
    deadline = time.monotonic() + timeout_s
    while (value := probe()) is None or value is False:
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout_s:g} s")
        time.sleep(0.1)
    return value


def _steps(log: str) -> list[int]:
    return [int(m.group(1)) for m in re.finditer(r"^step (\d+) ", log, re.M)]



def test_killed_worker_restarts_and_the_job_ends_at_its_step(testbed, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    job_dir = tmp_path / "job"
    job_dir.mkdir()
    for name in ("train.py", "digits.py"):
        shutil.copy(EXAMPLES / name, job_dir / name)
    job: dict[str, Any] = {
        "script": "train.py", "strategy": "flags",
        "args": [f"--steps={STEPS}", "--log_every=100", "--checkpoint_every=1000"],
        "restart": {"worker": "on-failure", "max": 2, "backoff": 1}}
    inv = testbed.write_inventory(job_dir / "cluster.yaml", job, hosts=["h1", "h2"], ps={"h2": 0})
    up = tfctl(inv, "up", timeout=300)
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        run_id = run_id_from(up.stdout)
        log = testbed.host("h2").workdir / ".tfctl" / "runs" / run_id / "worker-1.log"
        _until(lambda: _steps(log.read_text()) or None, 120, "worker:1 logs a step")
        chief_pid = task_pid(run_id, "worker:0")
        victim = task_pid(run_id, "worker:1")
        assert chief_pid is not None and victim is not None
        os.kill(chief_pid, signal.SIGSTOP)
        try:
            before = _steps(log.read_text())[-1]
            os.kill(victim, signal.SIGKILL)
            _until(lambda: _steps(log.read_text().split("restarting worker:1", 1)[-1]) or None
                   if "restarting worker:1" in log.read_text() else None,
                   180, "the restarted worker:1 logs a step")
        finally:
            os.kill(chief_pid, signal.SIGCONT)
        wait = tfctl(inv, "wait", "--timeout", "240", timeout=300)
        logs = tfctl(inv, "logs", "-n", "400").stdout
        assert wait.returncode == 0, wait.stderr + logs
        text = log.read_text()
        assert "restarting worker:1 (restart 1/2) after exit SIGKILL" in text
        after = _steps(text.split("restarting worker:1", 1)[1])
        assert after and after[0] >= before, (before, after)  # the global step went on
        chief = testbed.host("h1").workdir / ".tfctl" / "runs" / run_id / "worker-0.log"
        steps = _steps(chief.read_text())
        assert steps == sorted(steps)  # the global step never went back
        # Worker 0 finished the job (its RESULT line) with the final checkpoint at the planned
        # step; its last log line may read STEPS - 1 when the other worker made the last update.
        result = re.search(r"^RESULT (.*)$", chief.read_text(), re.M)
        assert result is not None and json.loads(result.group(1))["steps"] >= STEPS
        assert steps[-1] >= STEPS - 1
        assert processes_of_run(run_id) == {}
    finally:
        tfctl(inv, "down", "--grace", "1")
