"""Busy GPUs before launch: the pure judgement, the stand-in nvidia-smi on this machine, and on
the lab `up` refusing (GPU, pid, user named; free GPUs offered), `--force`, and `check`.

GPUs come from the test-only nvidia-smi stand-in (tests/support/fakes): a process counts as a GPU
user when its CUDA_VISIBLE_DEVICES names the GPU, so a `sleep` with a mask plays a colleague's job.
"""

from __future__ import annotations

import json
import os
import pwd
import subprocess
import sys
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.fakes import install_nvidia_smi_standin
from tests.support.testbed.testbed import Testbed
from tests.support.testbedtools import FOREVER, job_dir, processes_of_run, run_id_from, tfctl
from tfctl.inventory.model import Host, Inventory, Job
from tfctl.inventory.plan import make_plan
from tfctl.remote.connect.fleet import Fleet
from tfctl.remote.gpus.busy import (
    NO_NVIDIA_SMI,
    find_busy_gpus,
    judge_gpus_busy,
    parse_nvsmi_output,
    read_host,
)
from tfctl.remote.gpus.nvsmi import GpuProcess
from tfctl.remote.runs.current import state_file

GPUS = {"GPU-aaa": 0, "GPU-bbb": 1, "GPU-ccc": 2}


# ---------------------------------------------------------------- pure

def test_judge_host_reports_only_assigned_gpus_and_offers_the_free_ones() -> None:
    apps = [GpuProcess("GPU-aaa", 10, 1500.0, "python"), GpuProcess("GPU-ccc", 11, 800.0, "x"),
            GpuProcess("GPU-bbb", 12, 100.0, "gone"), GpuProcess("GPU-aaa", 13, 50.0, "ours")]
    procs = {10: {"user": "alice", "cmdline": "python train.py", "tfctl_run_id": None},
             12: None,  # ended between nvidia-smi and /proc
             13: {"user": "me", "cmdline": "python job.py", "tfctl_run_id": "r1",
                  "tfctl_task": "worker:0"}}
    state = judge_gpus_busy("h", ("0", "1"), GPUS, apps, procs, own_run_id="r1")
    assert state.assigned == (0, 1) and state.listed == (0, 1, 2)
    assert [(u.gpu_index, u.pid, u.user) for u in state.busy] == [(0, 10, "alice")]
    assert state.busy[0].describe() == "GPU 0: pid 10 (user alice, 1500 MiB, python train.py)"
    assert state.free == ()  # every GPU holds some process (the gone one was listed)
    other_run = judge_gpus_busy("h", ("0",), GPUS, apps[3:], procs)
    assert other_run.busy[0].describe().endswith("; tfctl run r1 worker:0")
    assert other_run.free == (1, 2)


def test_mask_tokens_may_be_uuids() -> None:
    state = judge_gpus_busy("h", ("GPU-ccc",), GPUS, [GpuProcess("GPU-ccc", 5, None, "p")], {})
    assert state.assigned == (2,)
    assert state.busy[0].describe() == "GPU 2: pid 5 (user ?, p)"


@pytest.mark.parametrize("stdout, error", [
    ("@@tfctl-gpus:none\n", NO_NVIDIA_SMI),
    ("No devices were found\n@@tfctl-gpus:apps\nNo devices were found\n",
     "nvidia-smi lists no GPUs"),
    ("Failed to initialize NVML: Driver/library version mismatch\n@@tfctl-gpus:apps\n",
     "nvidia-smi failed: Failed to initialize NVML: Driver/library version mismatch"),
])
def test_unreadable_gpus_say_why(stdout: str, error: str) -> None:
    assert parse_nvsmi_output(stdout) == ({}, [], error)


def test_parse_nvsmi_output_reads_map_and_apps() -> None:
    out = ("0, GPU-aaa\n1, GPU-bbb\n@@tfctl-gpus:apps\n"
           "GPU-bbb, 4242, 1500, python, with a comma\n")
    gpus, apps, error = parse_nvsmi_output(out)
    assert error is None and gpus == {"GPU-aaa": 0, "GPU-bbb": 1}
    assert apps == [GpuProcess("GPU-bbb", 4242, 1500.0, "python, with a comma")]


# ---------------------------------------------------------------- the stand-in, locally

@pytest.fixture
def standin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """The stand-in first on PATH with 2 GPUs, counting only processes with our unique tag."""
    for name in list(os.environ):
        if name.startswith(("TFCTL_TEST_", "TFCTL_RUN_ID", "CUDA_VISIBLE_DEVICES")):
            monkeypatch.delenv(name)
    install_nvidia_smi_standin(tmp_path / "bin")
    config = tmp_path / "gpus.json"
    config.write_text(json.dumps({"host": "local", "gpus": [{}, {}]}))
    tag = uuid.uuid4().hex
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:{os.environ['PATH']}")
    monkeypatch.setenv("TFCTL_TEST_NVSMI_TAG", tag)
    monkeypatch.setenv("TFCTL_TEST_NVSMI_CONFIG", str(config))
    return tag


def _local_fleet(tmp: Path, gpus: tuple[int, ...]) -> Fleet:
    host = Host(name="box", address="127.0.0.1", user=None, port=None, identity_file=None,
                known_hosts="/dev/null", jump=None, workdir=str(tmp / "work"),
                python=sys.executable, env={}, gpus=gpus, ps=0, transport="local")
    return Fleet(Inventory("t", (host,), Job(script="job.py"), path=str(tmp / "c.yaml")))


def test_read_host_names_pid_user_memory_with_the_standin(standin: str, tmp_path: Path) -> None:
    fleet = _local_fleet(tmp_path, (1,))
    assert read_host(fleet.transport("box"), ("1",)).busy == ()
    stranger = subprocess.Popen(["sleep", "60"], env={**os.environ, "CUDA_VISIBLE_DEVICES": "1"})
    ours = subprocess.Popen(["sleep", "60"], env={**os.environ, "CUDA_VISIBLE_DEVICES": "1",
                                                  "TFCTL_RUN_ID": "r-ours",
                                                  "TFCTL_TASK": "worker:0"})
    try:
        state = read_host(fleet.transport("box"), ("1",), own_run_id="r-ours")
        me = pwd.getpwuid(os.getuid()).pw_name
        assert [(u.gpu_index, u.pid, u.user, u.used_memory_mib) for u in state.busy] == [
            (1, stranger.pid, me, 1500.0)]
        assert state.busy[0].command == "sleep 60" and state.free == (0,)
        report = find_busy_gpus(fleet, make_plan(fleet.inventory))
        assert report.busy_lines() == [
            f"box: GPU 1: pid {stranger.pid} (user {me}, 1500 MiB, sleep 60)",
            f"box: GPU 1: pid {ours.pid} (user {me}, 1500 MiB, sleep 60); tfctl run r-ours "
            "worker:0"]
        assert report.free_text() == "box: 0"
        # a plan on GPU 0 only is not bothered by them
        assert find_busy_gpus(_local_fleet(tmp_path, (0,)), make_plan(
            _local_fleet(tmp_path, (0,)).inventory)).busy == ()
    finally:
        for child in (stranger, ours):
            child.kill()
            child.wait()


# ---------------------------------------------------------------- on the lab


def test_up_refuses_busy_gpu_then_force_launches(gpu_testbed: Testbed, tmp_path: Path,
                                                 stranger: Callable[..., int]) -> None:
    holder = stranger("h2", 0)
    inv = gpu_testbed.write_inventory(job_dir(tmp_path) / "cluster.yaml", FOREVER,
                                      hosts=["h1", "h2"], gpus={"h1": [1], "h2": [0]},
                                      ps={"h1": 1, "h2": 0})
    try:
        refused = tfctl(inv, "up")
        assert refused.returncode == 1, refused.stdout + refused.stderr
        err = refused.stderr
        assert f"h2: GPU 0: pid {holder} (user {gpu_testbed.user}, 1500 MiB, sleep 300)" in err
        assert "free GPUs instead: h2: 1" in err and "tfctl up --force" in err
        assert "nothing was started" in err and "run " not in refused.stdout
        assert not Path(state_file(str(inv), "lab")).exists()

        check = tfctl(inv, "check")
        assert check.returncode == 1
        assert "h2: FAILED" in check.stdout
        assert (f"h2: GPU 0: pid {holder} (user {gpu_testbed.user}, 1500 MiB, sleep 300) is using "
                "a GPU the plan assigns (free GPUs there: 1)") in check.stdout

        forced = tfctl(inv, "up", "--force")
        assert forced.returncode == 0, forced.stdout + forced.stderr
        assert "launching anyway (--force)" in forced.stderr
        run_id = run_id_from(forced.stdout)
        masks = {env["TFCTL_TASK"]: env["CUDA_VISIBLE_DEVICES"]
                 for env in processes_of_run(run_id).values()}
        assert masks == {"ps:0": "", "worker:0": "1", "worker:1": "0"}
    finally:
        tfctl(inv, "down", "--grace", "1")
