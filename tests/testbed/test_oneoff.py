"""`tfctl run` on the testbed: a one-off command on a free GPU, a sweep with more points than
the lab has free GPUs, two users sweeping at once, and what a one-off run's GPUs cost.

The GPUs are the test-only nvidia-smi stand-in's (tests/support/fakes): a process uses the GPUs
its CUDA_VISIBLE_DEVICES names, so `sleep` with a mask plays a colleague's job, and a point's
own process is seen on its GPU. The commands are a light script (no TensorFlow): it prints its
mask and sleeps. The inventories keep their TensorFlow job; `run` leaves its shape out.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.testbed.testbed import Testbed
from tests.support.testbed.users import ALICE, BOB, can_add_users
from tests.support.testbedtools import (
    FOREVER,
    job_dir,
    processes_of_run,
    tfctl,
    user_inventory,
    wait_until,
)

SCRIPT = ("import os, sys, time\n"
          "print('on GPU', os.environ['CUDA_VISIBLE_DEVICES'], sys.argv[1:], flush=True)\n"
          "time.sleep(float(sys.argv[1]) if len(sys.argv) > 1 else 300)\n")
"""`python train.py [SECONDS]`: says its GPUs, then holds them SECONDS (300)."""
BUSY_W = 0.85 * 250  # the stand-in's power.draw of a GPU a process holds


def _inventory(testbed: Testbed, tmp_path: Path, hosts: list[str]) -> Path:
    inv = testbed.write_inventory(job_dir(tmp_path) / "cluster.yaml", FOREVER, hosts=hosts,
                                  gpus={h: [0, 1] for h in hosts}, ps={h: 0 for h in hosts})
    (inv.parent / "train.py").write_text(SCRIPT)
    return inv


def _json(done: Any) -> dict[str, Any]:
    assert done.returncode == 0, done.stdout + done.stderr
    return dict(json.loads(done.stdout))


def _runs(inv: Path, env: dict[str, str] | None = None) -> dict[str, dict[str, Any]]:
    return {r["run_id"]: r for r in _json(tfctl(inv, "runs", "--json", env=env))["runs"]}


@pytest.fixture
def queue_env(tmp_path: Path) -> Iterator[dict[str, str]]:
    """This client's own queue records, and a waiter that looks every second."""
    yield {"XDG_CACHE_HOME": str(tmp_path / "cache"), "TFCTL_QUEUE_POLL_S": "1"}


def test_a_one_off_run_takes_a_free_gpu_and_is_a_run_like_any_other(
        gpu_testbed: Testbed, stranger: Callable[..., int], tmp_path: Path) -> None:
    colleague = stranger("h1", 0)
    inv = _inventory(gpu_testbed, tmp_path, ["h1", "h2"])
    run_id = None
    try:
        said = _json(tfctl(inv, "run", "--gpus", "1", "--json", "--", "python", "train.py"))
        run_id = said["run_id"]
        assert [(p["state"], p["host"], p["gpus"]) for p in said["points"]] == [
            ("started", "h1", [1])]  # h1's GPU 0 is the colleague's
        envs = list(processes_of_run(run_id).values())
        assert {(e["TFCTL_TASK"], e["CUDA_VISIBLE_DEVICES"], e["CUDA_DEVICE_ORDER"])
                for e in envs} == {("worker:0", "1", "PCI_BUS_ID")}
        assert not any("TF_CONFIG" in e for e in envs)
        (claim,) = gpu_testbed.claims_dir("h1").glob(f"*.run.{run_id}.json")
        assert json.loads(claim.read_text())["gpus"] == [1]

        lab = json.loads(tfctl(inv, "lab", "--json").stdout)
        rows = {(r["host"], r["gpu"]): r for r in lab}
        assert [h["run_id"] for h in rows[("h1", 1)]["holders"]] == [run_id]
        assert [h["pid"] for h in rows[("h1", 0)]["holders"]] == [colleague]
        assert rows[("h2", 0)]["state"] == "free"

        status = _json(tfctl(inv, "status", "--run", run_id, "--json"))
        assert [(t["name"], t["host"], t["state"]) for t in status["tasks"]] == [
            ("worker:0", "h1", "running")]
        logs = tfctl(inv, "logs", "--run", run_id)
        assert "on GPU 1 []" in logs.stdout, logs.stdout + logs.stderr
        run = _runs(inv)[run_id]
        assert (run["hosts"], run["oneoff"]["command"]) == (["h1"], "python train.py")
        assert "tfctl run: python train.py" in tfctl(inv, "runs").stdout

        down = tfctl(inv, "down", "--run", run_id, "--grace", "1")
        assert down.returncode == 0 and f"run {run_id}: stopped worker:0" in down.stdout, down
        assert not processes_of_run(run_id) and not claim.exists()
    finally:
        if run_id:
            tfctl(inv, "down", "--run", run_id, "--grace", "1")


def test_a_job_that_says_only_what_to_sync_serves_run_and_plans_nothing(
        gpu_testbed: Testbed, tmp_path: Path) -> None:
    """`job: {sync: {source: ./src}}`: `run` syncs ./src and runs CMD there; `plan` and `up`
    refuse it as they refuse any job without a script, starting nothing."""
    inv = gpu_testbed.write_inventory(tmp_path / "cluster.yaml", {"sync": {"source": "./src"}},
                                      hosts=["h1"], gpus={"h1": [0, 1]}, ps={"h1": 0})
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "x.py").write_text(SCRIPT)
    for command in ("plan", "up"):
        refused = tfctl(inv, command)
        assert refused.returncode == 2, refused.stdout + refused.stderr
        assert refused.stderr == (f"error: {inv}:{_line_of(inv, 'job:')}: job.script: this key "
                                  "is required — add `script: train.py` (relative to the synced "
                                  "folder)\n"), refused.stderr
    said = _json(tfctl(inv, "run", "--gpus", "1", "--json", "--", "python", "x.py", "0"))
    run_id = said["run_id"]
    try:
        assert [(p["state"], p["host"], p["gpus"]) for p in said["points"]] == [
            ("started", "h1", [0])]
        waited = tfctl(inv, "wait", "--run", run_id)
        assert waited.returncode == 0, waited.stdout + waited.stderr
        logs = tfctl(inv, "logs", "--run", run_id)
        assert "on GPU 0 ['0']" in logs.stdout, logs.stdout + logs.stderr
    finally:
        tfctl(inv, "down", "--run", run_id, "--grace", "1")


def test_lab_says_cpu_only_of_a_host_without_gpus_and_an_error_where_gpus_are_selected(
        gpu_testbed: Testbed, tmp_path: Path) -> None:
    """h3 has no nvidia-smi: with `gpus: 0` it is CPU only, as the inventory says; where the
    inventory selects GPUs there, the missing nvidia-smi is an error."""
    for gpus, state, what in ((0, "cpu", "CPU only"),
                              ([0], "error", "no nvidia-smi on the PATH there")):
        inv = gpu_testbed.write_inventory(tmp_path / f"{state}.yaml", FOREVER, hosts=["h1", "h3"],
                                          gpus={"h1": [0], "h3": gpus}, ps={"h1": 0, "h3": 0})
        listed = tfctl(inv, "lab", "--json")
        assert listed.returncode == 0, listed.stdout + listed.stderr
        rows = {(r["host"], r["gpu"]): r for r in json.loads(listed.stdout)}
        assert (rows[("h3", None)]["state"], rows[("h3", None)]["error"]) == (
            state, None if state == "cpu" else what)
        assert rows[("h1", 0)]["state"] == "free" and rows[("h1", 1)]["state"] == "free"
        table = tfctl(inv, "lab", env={"COLUMNS": "200"})
        assert table.returncode == 0, table.stdout + table.stderr
        (h3,) = [line for line in table.stdout.splitlines() if line.startswith("h3")]
        assert state in h3 and what in h3, table.stdout


def _line_of(path: Path, text: str) -> int:
    """The 1-based line of `path` that starts with `text`."""
    lines = path.read_text().splitlines()
    return next(i for i, line in enumerate(lines, 1) if line.startswith(text))


def test_a_sweep_runs_a_point_per_free_gpu_and_queues_the_rest(
        gpu_testbed: Testbed, tmp_path: Path, queue_env: dict[str, str]) -> None:
    inv = _inventory(gpu_testbed, tmp_path, ["h1", "h2", "h3"])  # h3: no nvidia-smi
    done = tfctl(inv, "run", "--each", "seed=1,2,3,4,5,6", "--", "python", "train.py", "6",
                 "--seed={seed}", env=queue_env)
    assert done.returncode == 0, done.stdout + done.stderr
    first = done.stdout.splitlines()[0]
    assert first.endswith(": 6 points: 4 started on h1:0 h1:1 h2:0 h2:1, 2 queued"), done.stdout
    sweep = first.split()[1].rstrip(":")
    record = Path(queue_env["XDG_CACHE_HOME"]) / "tfctl" / "queue" / f"{sweep}.json"
    try:
        queued = tfctl(inv, "queue", env=queue_env).stdout
        assert f"yours {sweep}: waiting" in queued and "seed=6  waiting" in queued, queued

        def ended() -> tuple[dict[str, Any], dict[str, dict[str, Any]]] | None:
            """The sweep's record and `tfctl runs`, once every point's run has ended and its
            host has recorded how (its watcher writes that a tick after the last process)."""
            found = json.loads(record.read_text())
            ids = [p["run_id"] for p in found["points"]]
            if found["state"] != "started" or any(processes_of_run(r) for r in ids):
                return None
            runs = _runs(inv)
            if any(runs[r]["finished_at"] is None for r in ids):
                return None
            return dict(found), runs

        found, runs = wait_until("every point ran, ended and was recorded", ended, 120)
        points = found["points"]
        assert [p["state"] for p in points] == ["started"] * 6
        at = [(p["host"], tuple(p["gpus"])) for p in points]
        assert len(set(at[:4])) == 4 and set(at) <= {("h1", (0,)), ("h1", (1,)), ("h2", (0,)),
                                                     ("h2", (1,))}
        assert [runs[p["run_id"]]["exit_code"] for p in points] == [0] * 6
        assert [runs[p["run_id"]]["oneoff"]["point"] for p in points] == [
            {"seed": str(i)} for i in range(1, 7)]
        assert {runs[p["run_id"]]["oneoff"]["sweep"] for p in points} == {sweep}
        # the queued points started once GPUs freed: after some first point had ended
        assert min(runs[p["run_id"]]["started_at"] for p in points[4:]) >= min(
            runs[p["run_id"]]["finished_at"] for p in points[:4]) - 1
        assert not [t for h in ("h1", "h2")  # its ticket went with its last point
                    for t in gpu_testbed.claims_dir(h).joinpath("queue").glob("*.json")]
    finally:
        tfctl(inv, "down", "--run", sweep, "--grace", "1", env=queue_env)


def test_down_stops_a_sweeps_running_points_and_cancels_its_waiting_ones(
        gpu_testbed: Testbed, tmp_path: Path, queue_env: dict[str, str]) -> None:
    inv = _inventory(gpu_testbed, tmp_path, ["h1"])
    said = _json(tfctl(inv, "run", "--each", "n=1,2,3", "--json", "--", "python", "train.py",
                       "300", "{n}", env=queue_env))
    sweep, points = said["sweep"], said["points"]
    assert [p["state"] for p in points] == ["started", "started", "waiting"]
    waiter = said["waiter_pid"]
    down = tfctl(inv, "down", "--run", sweep, "--grace", "1", env=queue_env)
    assert down.returncode == 0, down.stdout + down.stderr
    assert f"sweep {sweep}: 2 point runs stopped or ended, 1 waiting points cancelled" \
        in down.stdout
    assert not any(processes_of_run(p["run_id"]) for p in points[:2])
    assert not Path(f"/proc/{waiter}/cmdline").exists() or f"{sweep}.json".encode() not in Path(
        f"/proc/{waiter}/cmdline").read_bytes()
    assert not any(gpu_testbed.claims_dir("h1").glob("*.json"))  # claims and tickets gone
    assert not any(gpu_testbed.claims_dir("h1").joinpath("queue").glob("*.json"))
    listed = _json(tfctl(inv, "queue", "--json", env=queue_env))
    (mine,) = listed["mine"]
    assert [p["state"] for p in mine["points"]] == ["started", "started", "cancelled"]


@pytest.mark.skipif(not can_add_users(), reason="other Unix users need root")
def test_two_users_sweeping_at_once_never_share_a_gpu(shared_testbed: Testbed,
                                                      tmp_path: Path) -> None:
    """alice and bob, each on their own login and client, sweep two points each on the same
    four GPUs at the same moment: one of them places first, the other waits for that start
    and takes the two GPUs left."""
    testbed = shared_testbed
    clients = {}
    for user in (testbed.users[ALICE], testbed.users[BOB]):
        folder = tmp_path / user.name
        inv = user_inventory(testbed, user, folder, hosts=["h1", "h2"],
                             gpus={"h1": [0, 1], "h2": [0, 1]}, ps={"h1": 0, "h2": 0},
                             name=f"lab-{user.name}")
        (inv.parent / "train.py").write_text(SCRIPT)
        clients[user.name] = (inv, {"XDG_CACHE_HOME": str(folder / "cache"),
                                    "XDG_STATE_HOME": str(folder / "state")})
    started = {name: subprocess.Popen(
        [sys.executable, "-m", "tfctl.tui", "-i", str(inv), "run", "--each", "n=1,2", "--json",
         "--", "python", "train.py", "300", "{n}"], cwd=inv.parent, text=True,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env={**os.environ, **env})
        for name, (inv, env) in clients.items()}
    said: dict[str, dict[str, Any]] = {}
    try:
        for name, child in started.items():
            out, err = child.communicate(timeout=180)
            assert child.returncode == 0, out + err
            said[name] = json.loads(out)
        placed = {(p["host"], tuple(p["gpus"])): name for name, s in said.items()
                  for p in s["points"]}
        assert sorted(placed) == [("h1", (0,)), ("h1", (1,)), ("h2", (0,)), ("h2", (1,))]
        for host in ("h1", "h2"):
            owners = {json.loads(c.read_text())["gpus"][0]: c.name.split(".")[0]
                      for c in testbed.claims_dir(host).glob("*.run.*.json")}
            assert owners == {g: placed[(host, (g,))] for g in (0, 1)}
    finally:
        for name, (inv, env) in clients.items():
            if name in said:
                tfctl(inv, "down", "--run", said[name]["sweep"], "--grace", "1", env=env)


@pytest.fixture
def power_testbed(testbed: Testbed) -> Iterator[Testbed]:
    """h1's GPU 0 reports power.draw; GPU 1 is an older GeForce that answers [Not Supported]."""
    testbed.standin_gpus("h1", 2, gpus=[{}, {"name": "NVIDIA GeForce GTX 970", "power": None}])
    yield testbed
    testbed.remove_from_path("h1", "nvidia-smi")


def test_a_one_off_runs_energy_or_why_it_is_unknown(power_testbed: Testbed,
                                                     tmp_path: Path) -> None:
    inv = _inventory(power_testbed, tmp_path, ["h1"])
    said = _json(tfctl(inv, "run", "--gpus", "2", "--json", "--", "python", "train.py", "6"))
    run_id = said["run_id"]
    waited = tfctl(inv, "wait", "--run", run_id, "--timeout", "120")
    assert waited.returncode == 0, waited.stdout + waited.stderr
    run_dir = power_testbed.host("h1").workdir / ".tfctl" / "runs" / run_id
    wait_until("the run's watcher recorded its end", lambda: (run_dir / "finished.json").exists()
               and not processes_of_run(run_id), 60)
    gpu0, gpu1 = _runs(inv)[run_id]["gpu_costs"]
    assert (gpu0["index"], gpu1["index"]) == (0, 1)
    assert gpu0["held_s"] >= 5 and gpu0["energy_wh"] > 0 and gpu0["energy_unknown"] is None
    watts = gpu0["energy_wh"] * 3600 / gpu0["held_s"]
    assert 0.5 * BUSY_W <= watts <= 1.01 * BUSY_W, (watts, gpu0)
    assert (gpu1["energy_wh"], gpu1["energy_unknown"]) == (None, "power not reported")
    assert gpu1["held_s"] >= 5
