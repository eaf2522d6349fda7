"""A host that restarts mid-run, on the lab: its tasks read lost, `tfctl restart` brings them back.

The host is restarted as far as tfctl can tell (tests/support/testbed/reboot.py): every process of
it killed, sshd kept, and a new boot id and boot time that every later SSH session reads. `status`
then names its tasks `lost (host restarted at T)` (table and --json), the job waits for them, `tfctl
restart` starts them again in the same run with their plan and the host's watcher, and the job ends
by its rule. With the bundled trainer, the restarted task resumes from its last checkpoint.
"""

from __future__ import annotations

import json
import os
import re
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest

from tests.support.testbed.reboot import restart_host, undo
from tests.support.testbedtools import (
    examples_job_dir,
    job_dir,
    processes_of_run,
    run_id_from,
    status_json,
    task_pid,
    tfctl,
)
from tfctl.remote.reach import clock_hms

pytestmark = [pytest.mark.testbed]
T = TypeVar("T")

END_FILE = "end-now"
LIGHT = {"script": "job.py", "style": "flags",
         "args": ["--steps=3000", "--step_s=0.2", f"--end-file={END_FILE}"]}
"""ps:0 and worker:0 (the chief in practice) on h1, ps:1 and worker:1 on h2; worker:0 ends the
job once the test writes END_FILE on h1, after h2's restart and its tasks' return (or after
10 minutes)."""


def _until(probe: Callable[[], T | None], timeout_s: float, what: str) -> T:
    deadline = time.monotonic() + timeout_s
    while not (value := probe()):
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout_s:g} s")
        time.sleep(0.2)
    return value


def _recorded_step(ckpt: Path) -> int | None:
    """The step of the checkpoint TensorFlow's CheckpointManager last recorded as written (its
    `checkpoint` state file: what a restarted trainer restores), once its index is there."""
    try:
        state = (ckpt / "checkpoint").read_text()
    except OSError:
        return None
    found = re.search(r'^model_checkpoint_path: "(?:.*/)?ckpt-(\d+)"$', state, re.M)
    if found is None or not (ckpt / f"ckpt-{found.group(1)}.index").exists():
        return None
    return int(found.group(1))


def _tasks(inv: Path) -> dict[str, dict[str, Any]]:
    return {t["name"]: t for t in status_json(inv)["tasks"]}


def test_a_restarted_host_is_lost_and_restart_brings_its_tasks_back(isolated_testbed,  # type: ignore[no-untyped-def]
                                                                     tmp_path: Path) -> None:
    testbed = isolated_testbed
    inv = testbed.write_inventory(job_dir(tmp_path) / "cluster.yaml", LIGHT, hosts=["h1", "h2"])
    up = tfctl(inv, "up", timeout=300)
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        run_id = run_id_from(up.stdout)
        boot = restart_host(testbed, "h2")

        st = status_json(inv)
        tasks = {t["name"]: t for t in st["tasks"]}
        for name in ("ps:1", "worker:1"):
            assert tasks[name]["state"] == "lost", tasks[name]
            assert tasks[name]["host_restarted_at_s"] == boot.booted_at
            assert tasks[name]["pid"] is None  # its pid named a process of the earlier boot
        assert tasks["worker:0"]["state"] == "running"
        assert tasks["ps:0"]["host_restarted_at_s"] is None
        assert (st["job_ended"], st["fatal"], st["stopped"]) == (False, None, [])
        table = tfctl(inv, "status", env={"COLUMNS": "220"})
        assert table.returncode == 0, table.stderr
        said = f"lost (host restarted at {clock_hms(boot.booted_at)})"
        assert table.stdout.count(said) == 2, table.stdout
        assert (f"h2 restarted at {clock_hms(boot.booted_at)}: ps:1, worker:1 lost; `tfctl "
                "restart h2` starts them again in this run") in table.stdout

        running = tfctl(inv, "restart", "worker:0")
        assert running.returncode == 1, running.stdout + running.stderr
        assert (f"h1: worker:0 of run {run_id} is running on this host, not lost: only a lost "
                "task is started again") in running.stderr
        unknown = tfctl(inv, "restart", "worker:9")
        assert unknown.returncode == 2, unknown.stdout + unknown.stderr
        assert "has no host or task named 'worker:9'" in unknown.stderr

        again = tfctl(inv, "restart", "h2", "--json")
        assert again.returncode == 0, again.stdout + again.stderr
        done = json.loads(again.stdout)
        assert (done["run_id"], done["host"], done["tasks"]) == (run_id, "h2",
                                                                 ["ps:1", "worker:1"])
        assert done["started"] and done["host_restarted_at_s"] == boot.booted_at
        assert {n: s["state"] for n, s in done["states"].items()} == {
            "ps:1": "listening", "worker:1": "listening"}
        run_dir = testbed.host("h2").workdir / ".tfctl" / "runs" / run_id
        watcher = json.loads((run_dir / "keeper.pid.json").read_text())
        assert (watcher["pid"], watcher["boot_id"]) == (done["keeper_pid"], boot.boot_id)
        assert {t["state"] for t in _tasks(inv).values()} == {"running"}
        twice = tfctl(inv, "restart", "h2")
        assert twice.returncode == 1 and "no task of run" in twice.stderr, twice.stderr

        (testbed.host("h1").workdir / END_FILE).touch()  # worker:0 ends the job
        wait = tfctl(inv, "wait", "--timeout", "240", timeout=300)
        assert wait.returncode == 0, wait.stdout + wait.stderr
        assert "finished with exit status 0" in wait.stderr
        log = (run_dir / "worker-1.log").read_text()
        assert "starting worker:1 again" in log and "its host restarted at" in log
        assert log.count("worker:1 starting") == 2  # the same task, its log appended to
        _until(lambda: processes_of_run(run_id) == {}, 60, "every process of the run ends")
    finally:
        tfctl(inv, "down", "--grace", "1")
        undo(testbed, "h2")


@pytest.mark.tf
def test_a_real_tf_job_resumes_from_its_checkpoint_after_its_host_restarts(  # type: ignore[no-untyped-def]
        isolated_testbed, tmp_path: Path) -> None:
    testbed = isolated_testbed
    steps, every = 1500, 500
    train_dir = f"out/{tmp_path.name}"  # its own: no checkpoint another test left on h3
    job = {"script": "train.py", "strategy": "mirrored",
           "args": ["--strategy=mirrored", "--cpu_devices=2", f"--steps={steps}",
                    f"--log_every={every}", f"--checkpoint_every={every}",
                    f"--train_dir={train_dir}"]}
    inv = testbed.write_inventory(examples_job_dir(tmp_path) / "cluster.yaml", job, hosts=["h3"],
                              ps={"h3": 0})
    up = tfctl(inv, "up", timeout=300)
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        run_id = run_id_from(up.stdout)
        ckpt = testbed.host("h3").workdir / train_dir / "ckpt"
        saved = _until(lambda: _recorded_step(ckpt), 240, "a first checkpoint recorded")
        # Held from here to the restart (which kills it), so the job cannot end before its
        # host restarts however fast it trains: a few steps past the checkpoint are enough.
        trainer = task_pid(run_id, "worker:0")
        assert trainer is not None
        os.kill(trainer, signal.SIGSTOP)
        boot = restart_host(testbed, "h3")

        lost = _tasks(inv)["worker:0"]
        assert (lost["state"], lost["host_restarted_at_s"]) == ("lost", boot.booted_at)
        waiting = tfctl(inv, "wait", "--timeout", "3")  # the job waits for its lost task
        assert waiting.returncode == 1 and "still running" in waiting.stderr, waiting.stderr
        assert (f"h3 restarted at {clock_hms(boot.booted_at)}: worker:0 lost; `tfctl restart "
                "h3` starts it again in this run; the job waits") in waiting.stderr

        again = tfctl(inv, "restart", "worker:0")
        assert again.returncode == 0, again.stdout + again.stderr
        assert f"started worker:0 on h3 again (lost when h3 restarted at " \
               f"{clock_hms(boot.booted_at)})" in again.stderr
        wait = tfctl(inv, "wait", "--timeout", "400", timeout=450)
        log = (testbed.host("h3").workdir / ".tfctl" / "runs" / run_id / "worker-0.log").read_text()
        assert wait.returncode == 0, wait.stderr + log[-3000:]
        resumed = re.search(r"^resumed from \S+ckpt-(\d+) at global step (\d+)$", log, re.M)
        assert resumed is not None, log[-3000:]
        assert int(resumed.group(2)) >= saved >= every  # its last checkpoint, not step 1
        result = re.search(r"^RESULT (.*)$", log, re.M)
        assert result is not None and json.loads(result.group(1))["steps"] == steps
        assert log.index("starting worker:0 again") < resumed.start()
        _until(lambda: processes_of_run(run_id) == {}, 60, "every process of the run ends")
    finally:
        tfctl(inv, "down", "--grace", "1")
        undo(testbed, "h3")
