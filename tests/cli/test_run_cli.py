"""`tfctl run` on this machine (`transport: local`): what it refuses, in one sentence each, and a
CPU-only one-off run that is a run like any other (`status`, `logs`, `wait` with `--run`, and
`runs`). The GPUs are the test-only nvidia-smi stand-in's, on the PATH of tfctl (and so of its
local agent); its tag keeps other tests' processes out of its view (fakes.standin_first_on_path).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.support.fakes import standin_first_on_path
from tests.support.localcluster import run_tfctl


@pytest.fixture
def box(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
        ) -> Iterator[tuple[Path, dict[str, str]]]:
    """An inventory of one local host with two stand-in GPUs (its TensorFlow job is left out by
    `run`), and the environment its commands run in."""
    standin_first_on_path(tmp_path / "bin", 2, monkeypatch)
    src = tmp_path / "src"
    src.mkdir()
    (src / "count.py").write_text("import os, sys\nprint('point', sys.argv[1:], "
                                  "repr(os.environ['CUDA_VISIBLE_DEVICES']), flush=True)\n"
                                  "sys.exit(int(sys.argv[-1]) if sys.argv[-1].isdigit() else 0)\n")
    inv = src / "cluster.yaml"
    inv.write_text(yaml.safe_dump({"name": "box", "defaults": {"python": sys.executable},
                                   "hosts": [{"name": "a", "address": "127.0.0.1",
                                              "transport": "local", "gpus": [0, 1],
                                              "workdir": str(tmp_path / "work")}],
                                   "job": {"script": "count.py", "strategy": "mirrored"}}))
    yield inv, {"XDG_CACHE_HOME": str(tmp_path / "cache"),
                "XDG_STATE_HOME": str(tmp_path / "state")}


@pytest.mark.parametrize("args, said", [
    (["--"], "no command to run: give it after `--`"),
    (["--each", "seed=1,2", "--", "python", "x.py"], "`{seed}` appears nowhere in the command"),
    (["--each", "seed", "--", "x"], "is not KEY=V1,V2"),
    (["--gpus", "3", "--", "python", "x.py"], "no host has 3 GPUs: the largest is a, with 2 "
                                              "GPUs; ask for fewer with --gpus"),
    (["--host", "b", "--", "x"], "'b' is not a host of"),
    (["--timeout", "1h", "--", "x"], "--timeout is for points that wait"),
    (["--when-free", "--timeout", "soon", "--", "x"], "cannot read the duration"),
])
def test_bad_input_is_one_sentence_and_starts_nothing(box: tuple[Path, dict[str, str]],
                                                      args: list[str], said: str) -> None:
    inv, env = box
    done = run_tfctl(inv, "run", *args, env=env)
    assert done.returncode == 2, done.stdout + done.stderr
    assert said in done.stderr and "Traceback" not in done.stderr
    assert not (inv.parent.parent / "work").exists()  # nothing synced, nothing started


@pytest.mark.parametrize("args, said", [
    (["--wait"], "--wait does not go with it"),
    (["--on", "slurm"], "does not go with --on slurm: Slurm queues the job itself"),
])
def test_up_when_free_refuses_what_does_not_go_with_the_queue(
        box: tuple[Path, dict[str, str]], args: list[str], said: str) -> None:
    """tfctl's queue waits for the hosts' GPUs: `--on slurm` (a scheduler with its own queue)
    and `--wait` are refused in one sentence, the engine's own answer for `--on`."""
    inv, env = box
    done = run_tfctl(inv, "up", "--when-free", *args, env=env)
    assert done.returncode == 2, done.stdout + done.stderr
    assert said in done.stderr and "Traceback" not in done.stderr
    assert not (inv.parent.parent / "work").exists()


def test_no_free_gpu_now_names_who_holds_them(box: tuple[Path, dict[str, str]]) -> None:
    inv, env = box
    holder = subprocess.Popen(["sleep", "300"], env={**os.environ, **env,
                                                     "CUDA_VISIBLE_DEVICES": "0,1"})
    try:
        done = run_tfctl(inv, "run", "--", "python", "count.py", env=env)
        assert done.returncode == 1, done.stdout + done.stderr
        line = done.stderr.strip().splitlines()[-1]
        assert line.startswith("error: no 1 GPU free on one host now: a: GPU 0: held by "), line
        assert f"pid {holder.pid}" in line and "`tfctl run --when-free` waits for them" in line
        assert not list((inv.parent.parent / "work" / ".tfctl" / "runs").glob("*"))
    finally:
        holder.kill()
        holder.wait()


def test_a_cpu_only_run_is_a_run_like_any_other(box: tuple[Path, dict[str, str]]) -> None:
    inv, env = box
    done = run_tfctl(inv, "run", "--gpus", "0", "--json", "--", "python", "count.py", "--x",
                     "3", env=env)
    assert done.returncode == 1, done.stdout + done.stderr  # it ended at once, and failed
    said = json.loads(done.stdout)
    run_id = said["run_id"]
    (point,) = said["points"]
    assert (point["state"], point["host"], point["gpus"], point["ended"]) == (
        "started", "a", [], "exited 3")

    waited = run_tfctl(inv, "wait", "--run", run_id, "--json", env=env)
    assert waited.returncode == 3, waited.stdout + waited.stderr  # the command's exit status
    assert json.loads(waited.stdout)["exit_code"] == 3
    logs = run_tfctl(inv, "logs", "--run", run_id, env=env)
    assert "point ['--x', '3'] ''" in logs.stdout, logs.stdout
    status = json.loads(run_tfctl(inv, "status", "--json", env=env).stdout)  # the latest run
    assert status["run_id"] == run_id
    assert [(t["name"], t["state"]) for t in status["tasks"]] == [("worker:0", "exited")]
    runs = json.loads(run_tfctl(inv, "runs", "--json", env=env).stdout)["runs"]
    (run,) = [r for r in runs if r["run_id"] == run_id]
    assert run["exit_code"] == 3
    assert run["oneoff"]["command"] == "python count.py --x 3" and run["oneoff"]["sweep"] is None
    listed = run_tfctl(inv, "runs", env=env).stdout
    assert "tfctl run: python count.py --x 3" in listed

    help_text = run_tfctl(inv, "run", "--help", env=env).stdout
    assert "tfctl run -- python train.py" in help_text and "--each" in help_text
