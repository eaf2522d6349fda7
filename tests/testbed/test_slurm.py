"""`tfctl up --on slurm` against a real Slurm (tests/support/testbed/slurm.py: munge, slurmctld, one
slurmd per lab host in its network namespace): the bundled trainer trains to completion as one Slurm
job in the flags (between-graph) style and under MultiWorkerMirroredStrategy; `down` mid-run
cancels the job and leaves no process; a failed job is reported with its cause. `status`, `logs`
and `wait` read the Slurm job, as they read a lab run."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.testbed.slurm import SlurmCluster, slurm_missing
from tests.support.testbed.testbed import Testbed
from tests.support.testbedtools import (
    environ_of,
    examples_job_dir,
    job_dir,
    processes_of_run,
    tfctl,
)
from tfctl.inventory import load_inventory
from tfctl.remote.controller import RunController, UpOptions
from tfctl.remote.runs.steps import NoHooks

pytestmark = [pytest.mark.testbed]


@pytest.fixture(scope="module")
def slurm(testbed: Testbed) -> Iterator[SlurmCluster]:
    """A real Slurm over the session's lab, started once for this module and stopped after it with
    nothing left behind (the lab tests after this module find its hosts as they were)."""
    why = slurm_missing()
    if why is not None:
        pytest.skip(why)
    if not testbed.isolated:
        pytest.skip("a Slurm lab needs the network-namespace lab (root and `ip netns`)")
    with SlurmCluster(testbed) as cluster:
        yield cluster
    assert cluster.step_processes() == []


@pytest.fixture
def cluster(slurm: SlurmCluster) -> Iterator[SlurmCluster]:
    """The session's Slurm, with no job left once the test is done."""
    yield slurm
    slurm.cancel_all()


def write_inventory(testbed: Testbed, folder: Path, job: dict[str, Any], submit: str = "local",
                    **kw: Any) -> Path:
    data = testbed.inventory_dict(job, **kw)
    data["slurm"] = {"host": submit, "workdir": str(folder.parent / "shared")}
    path = folder / "cluster.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def cli(cluster: SlurmCluster, inv: Path, *args: str, timeout: float = 240) -> Any:
    return tfctl(inv, *args, timeout=timeout, env={"SLURM_CONF": str(cluster.conf)})


def submit(cluster: SlurmCluster, inv: Path) -> str:
    up = cli(cluster, inv, "up", "--on", "slurm", "--json")
    assert up.returncode == 0, up.stdout + up.stderr
    run_id = str(json.loads(up.stdout)["run_id"])
    job_id = run_id.removeprefix("slurm-")
    assert job_id.isdigit() and f"submitted Slurm job {job_id} " in up.stderr
    return run_id


def until_running(cluster: SlurmCluster, inv: Path, tasks: int, timeout_s: float = 60
                  ) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while True:
        st = json.loads(cli(cluster, inv, "status", "--json").stdout)
        if sum(t["state"] == "running" for t in st["tasks"]) == tasks:
            return st
        assert time.monotonic() < deadline, st
        time.sleep(0.5)


def eventually(check: Callable[[], bool], timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, "not within 30 s"
        time.sleep(0.2)


def trainer_inventory(testbed: Testbed, tmp_path: Path, style: str, ps_on_h1: int) -> Path:
    """The bundled trainer, 20 steps, on h1 and h2, told its place by `style` (`flags`,
    `tf_config`), with `ps_on_h1` parameter servers on h1 and none on h2."""
    job = {"script": "train.py", "style": style, "args": ["--steps=20", "--log_every=10"]}
    return write_inventory(testbed, examples_job_dir(tmp_path), job, ps={"h1": ps_on_h1, "h2": 0},
                           hosts=["h1", "h2"])


def no_process_left(cluster: SlurmCluster, run_id: str) -> None:
    """Nothing of the run on any node: no task tagged with it, no step keeper, no job."""
    assert processes_of_run(run_id) == {}
    assert cluster.step_processes() == []
    assert cluster.jobs() == []


@pytest.mark.tf
def test_flags_between_graph_trains_to_completion_through_slurm(
        testbed: Testbed, cluster: SlurmCluster, tmp_path: Path) -> None:
    inv = trainer_inventory(testbed, tmp_path, "flags", ps_on_h1=1)
    run_id = submit(cluster, inv)
    # While it runs: each task is its own step on its node, with the cluster in node names.
    until_running(cluster, inv, 3)

    def trainers() -> dict[str, int]:
        return {env["TFCTL_TASK"]: pid for pid, env in processes_of_run(run_id).items()
                if env.get("SLURM_STEP_ID") and "--job_name" in " ".join(
                    Path(f"/proc/{pid}/cmdline").read_text().split("\0"))}

    eventually(lambda: len(trainers()) == 3)
    running = trainers()
    for task, pid in running.items():
        env = environ_of(pid)
        assert env["SLURM_JOB_ID"] == run_id.removeprefix("slurm-")
        assert env["SLURMD_NODENAME"] == ("h2" if task == "worker:1" else "h1")
        argv = Path(f"/proc/{pid}/cmdline").read_text().split("\0")
        assert "--ps_hosts=h1:2222" in argv and "--worker_hosts=h1:2223,h2:2223" in argv
    wait = cli(cluster, inv, "wait", "--timeout", "200", timeout=260)
    logs = cli(cluster, inv, "logs", "-n", "200").stdout
    assert wait.returncode == 0, wait.stderr + logs
    assert f"run {run_id} finished with exit status 0" in wait.stderr
    assert "worker:0 | RESULT" in logs
    assert re.search(r"^sbatch +\| tfctl: the job has ended \(exit 0\)$", logs, re.M), logs
    shared = tmp_path / "shared"  # the cluster's shared filesystem: the synced code, outputs
    assert (shared / "train.py").is_file()
    assert list((shared / "out" / "ckpt").glob("ckpt-*.index"))
    st = json.loads(cli(cluster, inv, "status", "--json").stdout)
    assert st["job_ended"] and st["exit_code"] == 0 and st["fatal"] is None
    states = {t["name"]: (t["host"], t["state"], t["exit_code"]) for t in st["tasks"]}
    assert states["worker:0"] == ("h1", "exited", 0)
    assert states["ps:0"][:2] == ("h1", "stopped")  # only serves: stopped at the end
    no_process_left(cluster, run_id)


@pytest.mark.tf
def test_multi_worker_mirrored_trains_to_completion_through_slurm(
        testbed: Testbed, cluster: SlurmCluster, tmp_path: Path) -> None:
    inv = trainer_inventory(testbed, tmp_path, "tf_config", ps_on_h1=0)
    up = cli(cluster, inv, "up", "--on", "slurm", "--wait", "--json", timeout=260)
    logs = cli(cluster, inv, "logs", "-n", "200").stdout
    assert up.returncode == 0, up.stderr + logs
    data = json.loads(up.stdout)  # submitted, then waited for: `up --wait` as on the lab
    run_id = data["run_id"]
    assert run_id.startswith("slurm-") and data["wait"]["ended"]
    assert data["wait"]["exit_code"] == 0 and data["wait"]["fatal"] is None
    assert "worker:0 | RESULT" in logs and '"style": "multi_worker"' in logs
    assert "worker:1 | tfctl: worker:1 on h2 " in logs  # its own step, on its node
    assert list((tmp_path / "shared" / "out" / "ckpt").glob("ckpt-*.index"))
    no_process_left(cluster, run_id)


def test_down_mid_run_cancels_the_job_and_leaves_no_process(
    testbed: Testbed, cluster: SlurmCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    job = {"script": "job.py", "style": "tf_config", "args": ["--forever"]}
    inv = write_inventory(testbed, job_dir(tmp_path), job, hosts=["h1", "h2"])
    run_id = submit(cluster, inv)
    until_running(cluster, inv, 4)  # ps:0, ps:1, worker:0, worker:1
    eventually(lambda: len(processes_of_run(run_id)) >= 4)  # each step has exec'd its task
    # The dashboard's reads (RunController.host_status, log_follower) see the Slurm run too.
    monkeypatch.setenv("SLURM_CONF", str(cluster.conf))
    with RunController(load_inventory(str(inv))) as controller:
        on_h2 = controller.host_status("h2")
        assert {(t.name, t.state) for t in on_h2} == {("ps:1", "running"),
                                                      ("worker:1", "running")}
        follower = controller.log_follower({"worker:1"})
        assert follower is not None
        lines = follower.poll(tail_lines=50).lines
        first = ("worker:1", "worker:1 starting, argv=['--forever']")
        eventually(lambda: first in lines or bool(lines.extend(follower.poll().lines)))
    down = cli(cluster, inv, "down", "--json")
    assert down.returncode == 0, down.stdout + down.stderr
    summary = json.loads(down.stdout)
    assert summary["run_id"] == run_id and summary["clean"]
    assert set(summary["stopped"]) == {"ps:0", "ps:1", "worker:0", "worker:1"}
    no_process_left(cluster, run_id)
    st = json.loads(cli(cluster, inv, "status", "--json").stdout)
    assert st["job_ended"] and {t["state"] for t in st["tasks"]} == {"stopped"}
    again = cli(cluster, inv, "down")
    assert again.returncode == 0 and "nothing to stop" in again.stdout


FAILING = """\
import os, sys, time
task = os.environ["TFCTL_TASK"]
print(task, "starting", flush=True)
if task.startswith("ps"):
    while True:
        time.sleep(1)
if task == "worker:0":
    open("data/train.csv")  # the data was never copied to the cluster
time.sleep(1)
"""


def test_a_failed_job_is_reported_with_its_error(testbed: Testbed, cluster: SlurmCluster,
                                                 tmp_path: Path) -> None:
    folder = tmp_path / "job"
    folder.mkdir()
    (folder / "job.py").write_text(FAILING)
    job = {"script": "job.py", "style": "flags"}
    inv = write_inventory(testbed, folder, job, ps={"h1": 1, "h2": 0}, hosts=["h1", "h2"])
    run_id = submit(cluster, inv)
    wait = cli(cluster, inv, "wait", "--timeout", "120", timeout=180)
    assert wait.returncode == 1, wait.stdout + wait.stderr
    assert "worker:0 on h1 failed (exited 1)" in wait.stderr
    assert "FileNotFoundError: [Errno 2] No such file or directory: 'data/train.csv'" \
        in wait.stderr
    status = cli(cluster, inv, "status")
    assert "worker:0 on h1 exited 1; its log says:" in status.stdout
    assert "worker:0 | FileNotFoundError" in status.stdout
    no_process_left(cluster, run_id)


def test_a_submit_host_reached_over_ssh(
    testbed: Testbed, cluster: SlurmCluster, tmp_path: Path
) -> None:
    """`slurm: {host: h1}`: the code goes to the workdir over tfctl's SSH connection (rsync), and
    sbatch, squeue, scontrol and scancel run on h1 (its PATH has the cluster's clients)."""
    for name, text in cluster.client_wrappers().items():
        testbed.write_tool("h1", name, text)
    try:
        job = {"script": "job.py", "style": "tf_config", "args": ["--steps=3"]}
        inv = write_inventory(testbed, job_dir(tmp_path), job, submit="h1", hosts=["h1", "h2"])
        up = tfctl(inv, "up", "--on", "slurm")  # no SLURM_CONF here: only h1 knows the cluster
        assert up.returncode == 0, up.stdout + up.stderr
        assert "h1: submitted Slurm job" in up.stderr
        assert (tmp_path / "shared" / "job.py").is_file()  # synced over SSH
        assert (tmp_path / "shared" / ".tfctl" / "slurm" / "lab.sbatch").is_file()
        wait = tfctl(inv, "wait", "--timeout", "60", timeout=120)
        assert wait.returncode == 0, wait.stderr + tfctl(inv, "logs").stdout
        logs = tfctl(inv, "logs", "worker:1").stdout
        assert "worker:1 | worker:1 done" in logs and "sbatch" not in logs
        run_id = json.loads(tfctl(inv, "status", "--json").stdout)["run_id"]
        no_process_left(cluster, run_id)
    finally:
        for name in cluster.client_wrappers():
            testbed.remove_from_path("h1", name)


def test_a_submit_host_that_is_no_host_entry_is_one_clear_sentence(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text("print('never run')\n")
    inv = tmp_path / "cluster.yaml"
    inv.write_text(yaml.safe_dump({
        "name": "bad", "job": {"script": "train.py"},
        "hosts": [{"name": "a", "address": "127.0.0.1", "transport": "local"}],
        "slurm": {"host": "login1", "workdir": str(tmp_path / "shared")}}))
    up = tfctl(inv, "up", "--on", "slurm")
    assert up.returncode == 2 and "Traceback" not in up.stderr
    assert "slurm.host: no host named 'login1' in the inventory" in up.stderr
    assert not (tmp_path / "shared").exists()  # nothing synced, nothing submitted


def test_a_job_slurm_ended_is_reported_as_slurm_ended_it(testbed: Testbed, cluster: SlurmCluster,
                                                         tmp_path: Path) -> None:
    """Cancelled outside tfctl (an admin's scancel; a time limit reads the same way): `wait`
    says so and exits 143, the tasks are stopped, not failed."""
    job = {"script": "job.py", "style": "tf_config", "args": ["--forever"]}
    inv = write_inventory(testbed, job_dir(tmp_path), job, ps={"h1": 0, "h2": 0},
                          hosts=["h1", "h2"])
    run_id = submit(cluster, inv)
    until_running(cluster, inv, 2)
    cluster.run("scancel", run_id.removeprefix("slurm-"))
    wait = cli(cluster, inv, "wait", "--timeout", "60", timeout=120)
    assert wait.returncode == 143, wait.stdout + wait.stderr
    assert f"Slurm job {run_id.removeprefix('slurm-')} was cancelled (exit status 143)" \
        in wait.stderr
    st = json.loads(cli(cluster, inv, "status", "--json").stdout)
    assert {t["state"] for t in st["tasks"]} == {"stopped"}
    no_process_left(cluster, run_id)


def test_up_interrupted_after_sbatch_cancels_the_job(testbed: Testbed, cluster: SlurmCluster,
                                                     tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """What `up`'s interrupt guard does once the run id is known: the submitted job is cancelled
    (`rollback`), as the started tasks of a run on the hosts are stopped."""
    job = {"script": "job.py", "style": "tf_config", "args": ["--forever"]}
    inv = write_inventory(testbed, job_dir(tmp_path), job, hosts=["h1", "h2"])
    monkeypatch.setenv("SLURM_CONF", str(cluster.conf))
    started: list[str] = []

    class Hooks(NoHooks):
        def run_started(self, run_id: str) -> None:
            started.append(run_id)

    with RunController(load_inventory(str(inv)), on="slurm") as controller:
        run_id = controller.up(UpOptions(), hooks=Hooks())
        assert started == [run_id] and controller.starting_run_id == run_id
        said = controller.rollback()
    assert said == f"cancelled Slurm job {run_id.removeprefix('slurm-')}"
    no_process_left(cluster, run_id)


def test_the_plans_gpu_masks_carry_over(
    testbed: Testbed, cluster: SlurmCluster, tmp_path: Path
) -> None:
    """Two GPUs per host (the cluster's nodes have `gres gpu:2`, plain files): the job asks for
    them and every task gets the mask `tfctl plan` gives it, computed by the script (this Slurm
    binds no GPU to a step)."""
    job = {"script": "job.py", "style": "tf_config", "args": ["--forever"]}
    inv = write_inventory(testbed, job_dir(tmp_path), job, gpus={"h1": 2, "h2": 2},
                          hosts=["h1", "h2"])
    plan = json.loads(cli(cluster, inv, "plan", "--json").stdout)
    masks = {t["name"]: t["cuda_visible_devices"] for t in plan["tasks"]}
    assert masks["worker:1"] == "1" and masks["worker:2"] == "0" and masks["ps:0"] == ""
    run_id = submit(cluster, inv)
    until_running(cluster, inv, len(masks))
    assert "#SBATCH --gres=gpu:2" in (tmp_path / "shared" / ".tfctl" / "slurm" /
                                      "lab.sbatch").read_text()

    def given() -> dict[str, str]:
        return {env["TFCTL_TASK"]: env["CUDA_VISIBLE_DEVICES"]
                for env in processes_of_run(run_id).values()}

    eventually(lambda: given() == masks)
    assert cli(cluster, inv, "down").returncode == 0
    no_process_left(cluster, run_id)
