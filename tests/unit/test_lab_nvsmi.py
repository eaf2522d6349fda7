"""How the host's `lab` and `gpu_state` read nvidia-smi (remote/agent/lab.LabNvsmiReading),
against the nvidia-smi stand-in run as a real program: its two selective queries at once, each
answered as a driver answers it, and every way nvidia-smi can fail said in one sentence."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.fakes import (
    NVIDIA_SMI_STANDIN,
    NVML_MISMATCH,
    make_standin_fail,
    standin_first_on_path,
)
from tfctl.remote.agent.lab import LabNvsmiReading, query_gpus


@pytest.fixture
def standin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """`nvidia-smi` on PATH: the stand-in, four GPUs, seeing only processes of this test."""
    yield standin_first_on_path(tmp_path / "bin", 4, monkeypatch)


def test_the_gpus_and_the_process_on_one_of_them(standin: Path) -> None:
    holder = subprocess.Popen(["sleep", "60"], env=dict(os.environ, CUDA_VISIBLE_DEVICES="2"))
    try:
        gpus, apps, error = query_gpus()
    finally:
        holder.kill()
        holder.wait()
    assert error is None
    assert [g["index"] for g in gpus] == [0, 1, 2, 3]
    assert all(g["uuid"].startswith("GPU-") and g["name"] == "NVIDIA GeForce GTX 1080 Ti"
               and g["memory_total_mib"] == 11264 for g in gpus)
    assert [g["utilization_pct"] == 0 for g in gpus] == [True, True, False, True]
    assert apps == [{"gpu_uuid": gpus[2]["uuid"], "pid": holder.pid, "used_memory_mib": 1500.0}]


def test_both_queries_run_at_once(standin: Path, tmp_path: Path) -> None:
    """Each call waits (up to 10 s) for the other to have started: one after the other, the
    first would wait alone and say so."""
    seen = tmp_path / "seen"
    seen.mkdir()
    (standin / "nvidia-smi").write_text(
        "#!/bin/sh\n"
        f"touch {seen}/$$\n"
        "i=0\n"
        f'while [ "$(ls {seen} | wc -l)" -lt 2 ] && [ $i -lt 100 ]; do\n'
        "  sleep 0.1; i=$((i+1))\n"
        "done\n"
        f'[ $i -lt 100 ] && echo together >> {tmp_path}/log || echo alone >> {tmp_path}/log\n'
        f"exec {sys.executable} {NVIDIA_SMI_STANDIN} \"$@\"\n")
    gpus, _, error = query_gpus()
    assert error is None and len(gpus) == 4
    assert (tmp_path / "log").read_text().split() == ["together", "together"]


@pytest.mark.parametrize(("how", "said"), [
    ("nvml", f"nvidia-smi failed: {NVML_MISMATCH}"),
    ("no_gpus", "nvidia-smi lists no GPUs"),
    ("not_on_path", "no nvidia-smi on the PATH there"),
])
def test_a_host_whose_gpus_cannot_be_read_says_why(
        standin: Path, monkeypatch: pytest.MonkeyPatch, how: str, said: str) -> None:
    make_standin_fail(how, monkeypatch)
    assert query_gpus() == ([], [], said)


def test_a_hanging_nvidia_smi_is_killed_at_the_deadline(
        standin: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TFCTL_TEST_NVSMI_HANG", "1")
    reading = LabNvsmiReading(timeout_s=1.0)
    assert reading.result() == ([], [], "nvidia-smi did not answer in 1 s")
    assert [call.returncode is not None for call in reading.calls] == [True, True]  # reaped


def test_the_compute_apps_failing_keeps_the_gpus(standin: Path, tmp_path: Path) -> None:
    (standin / "nvidia-smi").write_text(
        "#!/bin/sh\n"
        'case "$1" in --query-compute-apps*) echo "Unable to determine the device handle for '
        'GPU 0000:02:00.0: Unknown Error"; exit 15 ;; esac\n'
        f"exec {sys.executable} {NVIDIA_SMI_STANDIN} \"$@\"\n")
    gpus, apps, error = query_gpus()
    assert len(gpus) == 4 and apps == []
    assert error == ("nvidia-smi failed: Unable to determine the device handle for GPU "
                     "0000:02:00.0: Unknown Error")
