"""PyTorch and JAX jobs of ranks across two testbed hosts, on the CPU, from the frameworks' venv
(tests/support/fwvenv.py), on hosts whose own name resolves to loopback as a desktop's does
(tests/support/testbed/netns.py): a script written for torchrun (DDP over gloo) and a PyTorch
Lightning script for two nodes run unchanged with `up --wait` exiting 0 (each rank's host finds
gloo's interface at start); a plain JAX script (psum over gloo collectives) and a Keras 3 script
calling `keras.distribution.initialize()` are refused before start, with the cause and the fix,
and run unchanged once the fix is made; a rank that fails ends the whole group
(inventory/frameworks/ranks.py)."""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.testbedtools import (
    processes_of_run,
    run_id_from,
    status_json,
    tfctl,
    wait_until,
)

pytestmark = [pytest.mark.testbed, pytest.mark.frameworks, pytest.mark.timeout(1500)]

EXAMPLES = Path(__file__).parents[2] / "examples"
JOBS = Path(__file__).parents[1] / "support" / "data" / "jobs"
QUICK_END = {"TFCTL_CLOSED_FOR_GOOD_S": "3"}


def job_inventory(testbed: Any, tmp_path: Path, python: Path, job: dict[str, Any],
                  *scripts: Path, on_h2: int = 1) -> Path:
    """`job` on h1 (one rank) and h2 (`on_h2` ranks), CPU only, run by `python`."""
    folder = tmp_path / "job"
    folder.mkdir()
    for script in scripts:
        shutil.copy(script, folder / script.name)
    return testbed.write_inventory(folder / "cluster.yaml", job, hosts=["h1", "h2"],  # type: ignore[no-any-return]
                                   ps={"h1": 0, "h2": 0}, python=str(python),
                                   host_fields={"h2": {"cpu_workers": on_h2}})


def up_wait(testbed: Any, tmp_path: Path, python: Path, job: dict[str, Any], *scripts: Path,
            on_h2: int = 1) -> tuple[subprocess.CompletedProcess[str], dict[str, Any], str]:
    """`up --wait` of `job_inventory`'s job: its answer, the plan, and the logs; the run is
    stopped afterwards whatever happened."""
    return up_wait_of(job_inventory(testbed, tmp_path, python, job, *scripts, on_h2=on_h2))


def up_wait_of(inv: Path) -> tuple[subprocess.CompletedProcess[str], dict[str, Any], str]:
    """`up_wait` of the inventory at `inv`."""
    plan = json.loads(tfctl(inv, "plan", "--json").stdout)
    try:
        up = tfctl(inv, "up", "--wait", timeout=900, env=QUICK_END)
        logs = tfctl(inv, "logs", "-n", "40").stdout
        if "is up" in up.stdout:
            assert processes_of_run(run_id_from(up.stdout)) == {}, "the run left processes"
        return up, plan, logs
    finally:
        tfctl(inv, "down", "--grace", "1")


def result(logs: str) -> dict[str, Any]:
    line = next(x for x in logs.splitlines() if "RESULT " in x)
    return dict(json.loads(line.split("RESULT ", 1)[1]))


def test_a_torchrun_script_trains_ddp_across_two_hosts(testbed: Any, frameworks_python: Path,
                                                       tmp_path: Path) -> None:
    job = {"script": "torch_ddp.py", "framework": "torch", "args": ["--steps=10"]}
    up, plan, logs = up_wait(testbed, tmp_path, frameworks_python, job,
                             EXAMPLES / "torch_ddp.py", on_h2=2)  # LOCAL_RANK 0 and 1 there
    assert up.returncode == 0, up.stdout + up.stderr + logs
    runs = tfctl(tmp_path / "job" / "cluster.yaml", "runs")
    assert "    PyTorch: 3 tasks on h1, h2" in runs.stdout, runs.stdout  # the run's framework
    check = tfctl(tmp_path / "job" / "cluster.yaml", "check", "-v")
    for host in ("h1", "h2"):  # torch asked on each host, in the frameworks' venv
        assert f"{host}: PyTorch 2.13.0+cpu sees 0 GPU(s); backends: gloo" in check.stdout, \
            check.stdout + check.stderr
        assert f"{host}: its hostname {host} resolves to 127.0.1.1 (loopback), which gloo " \
               "would advertise to the other hosts: each rank gets GLOO_SOCKET_IFNAME" \
               in check.stdout, check.stdout  # what tfctl does about it
    assert "GLOO_SOCKET_IFNAME=<found on the host at start: its interface toward " \
           f"{testbed.address('h1')}>" in tfctl(tmp_path / "job" / "cluster.yaml", "plan").stdout
    assert [(t["host"], t["env"]["RANK"], t["env"]["LOCAL_RANK"]) for t in plan["tasks"]] == \
        [("h1", "0", "0"), ("h2", "1", "0"), ("h2", "2", "1")]
    assert result(logs) == {"world_size": 3, "ranks_sum": 3, "same_weights": True,
                            "loss": result(logs)["loss"], "backend": "gloo"}


def test_a_lightning_script_for_two_nodes_trains_ddp_across_two_hosts(
        testbed: Any, frameworks_python: Path, tmp_path: Path) -> None:
    """PyTorch Lightning (`strategy="ddp", num_nodes=2`, CPU), unchanged, on hosts whose
    hostname resolves to loopback (as the testbed's do): gloo finds its interface from
    GLOO_SOCKET_IFNAME, which each rank's host finds at start."""
    job = {"script": "lightning_ddp.py", "framework": "torch"}
    up, plan, logs = up_wait(testbed, tmp_path, frameworks_python, job,
                             JOBS / "lightning_ddp.py")
    assert up.returncode == 0, up.stdout + up.stderr + logs
    assert result(logs) == {"world_size": 2, "global_rank": 0, "same_weights": True}, logs
    lan = f"{testbed.address('h1')},{testbed.address('h2')}"
    assert {t["env"]["GLOO_SOCKET_IFNAME"] for t in plan["tasks"]} == \
        {f"tfctl:interface-to:{lan}"}, plan  # found by each rank's host at its start
    assert f"GLOO_SOCKET_IFNAME=eth0 (the interface that reaches {lan.replace(',', ', ')})" \
        in logs, logs


def test_a_rank_told_loopback_fails_with_the_cause_as_its_hint(testbed: Any,
                                                              frameworks_python: Path,
                                                              tmp_path: Path) -> None:
    """The inventory's GLOO_SOCKET_IFNAME wins over what the host finds; `lo` makes every rank
    advertise loopback, as a desktop's hostname does without it. The job fails, and the story
    of the rank that failed first names the cause: PyTorch's hints before TensorFlow's."""
    job = {"script": "torch_ddp.py", "framework": "torch", "args": ["--steps=2"],
           "task_env": {"worker": {"GLOO_SOCKET_IFNAME": "lo"}}}
    up, plan, logs = up_wait(testbed, tmp_path, frameworks_python, job,
                             EXAMPLES / "torch_ddp.py")
    said = up.stdout + up.stderr
    assert up.returncode != 0, said + logs
    assert {t["env"]["GLOO_SOCKET_IFNAME"] for t in plan["tasks"]} == {"lo"}, plan
    assert "remote=[127.0.0.1]" in said, said
    assert "hint: a rank connected to a loopback address (127.x) another rank advertised: " \
           "that rank's host maps its hostname to loopback" in said, said
    assert "are the ports open" not in said, said


@contextlib.contextmanager
def hostnames_on_lan(testbed: Any, hosts: tuple[str, ...] = ("h1", "h2")) -> Iterator[None]:
    """The fix `check` and `up` name for JAX: each host's /etc/hosts maps its own name to its
    LAN address instead of 127.0.1.1 (the namespace's hosts file, mounted over /etc/hosts, is
    rewritten in place); put back afterwards."""
    files = {h: Path("/etc/netns", testbed.host(h).namespace, "hosts") for h in hosts}
    kept = {h: f.read_text() for h, f in files.items()}
    try:
        for h, f in files.items():
            assert f"127.0.1.1 {h}\n" in kept[h], kept[h]
            f.write_text(kept[h].replace(f"127.0.1.1 {h}\n", f"{testbed.address(h)} {h}\n"))
        yield
    finally:
        for h, f in files.items():
            f.write_text(kept[h])


def refused_for_loopback(inv: Path) -> None:
    """`check` names each host whose name resolves to loopback, and `up` refuses the JAX job
    before anything starts, with the cause and the fix."""
    check = tfctl(inv, "check")
    assert check.returncode != 0, check.stdout
    for host in ("h1", "h2"):
        assert f"{host}: its hostname {host} resolves to 127.0.1.1 (loopback): JAX's gloo " \
               "collectives" in check.stdout, check.stdout
    last_run = tfctl(inv, "status").stdout.splitlines()[0]  # an earlier test's, or none yet
    up = tfctl(inv, "up", "--wait", timeout=300, env=QUICK_END)
    said = up.stdout + up.stderr
    assert up.returncode != 0 and "is up" not in said, said
    assert "h1: a JAX job across hosts cannot run there: its hostname h1 resolves to " \
           "127.0.1.1 (loopback)" in said, said
    assert "map h1 to the host's LAN address in its /etc/hosts" in said, said
    assert tfctl(inv, "status").stdout.splitlines()[0] == last_run  # no run started


def test_a_jax_script_sums_over_every_process_of_two_hosts(testbed: Any,
                                                           frameworks_python: Path,
                                                           tmp_path: Path) -> None:
    """Refused where the hosts' names resolve to loopback; runs once they resolve to the LAN."""
    job = {"script": "jax_psum.py", "framework": "jax"}
    inv = job_inventory(testbed, tmp_path, frameworks_python, job, EXAMPLES / "jax_psum.py")
    refused_for_loopback(inv)
    with hostnames_on_lan(testbed):
        up, _, logs = up_wait_of(inv)
    assert up.returncode == 0, up.stdout + up.stderr + logs
    said = result(logs)
    assert said["processes"] == 2 and said["psum"] == said["expected"] == 3.0, said


def test_a_keras_script_initializes_its_distribution_from_the_environment(
        testbed: Any, frameworks_python: Path, tmp_path: Path) -> None:
    """`keras.distribution.initialize()` runs a collective at once (its seed): refused where
    the hosts' names resolve to loopback, it runs unchanged once they resolve to the LAN."""
    job = {"script": "keras_jax.py", "framework": "jax"}
    inv = job_inventory(testbed, tmp_path, frameworks_python, job, EXAMPLES / "keras_jax.py")
    refused_for_loopback(inv)
    with hostnames_on_lan(testbed):
        up, _, logs = up_wait_of(inv)
        check = tfctl(inv, "check", "-v")
    assert up.returncode == 0, up.stdout + up.stderr + logs
    assert result(logs)["processes"] == 2 and result(logs)["devices"] == 2
    assert check.returncode == 0, check.stdout
    assert "h2: JAX 0.10.2 (jaxlib 0.10.2), Keras 3.15.1" in check.stdout, check.stdout
    assert "h2: JAX 0.10.2 sees 0 GPU(s) (default backend cpu)" in check.stdout, check.stdout


def test_a_rank_that_fails_ends_the_whole_group(testbed: Any, frameworks_python: Path,
                                                tmp_path: Path) -> None:
    """Rank 1 (on h2) fails; ranks 0 (h1) and 2 (h2) idle with no collective that would tell
    them. h2's watcher stops rank 2 at once, with no client looking; rank 0's host cannot see
    h2's ranks, so rank 0 runs on until a client looks: `wait` stops it, with rank 1's status."""
    job = {"script": "ddp_rank_fails.py", "framework": "torch",
           "task_env": {"worker": {"FAIL_RANK": "1", "FAIL_AFTER_S": "10"}}}
    inv = job_inventory(testbed, tmp_path, frameworks_python, job, JOBS / "ddp_rank_fails.py",
                        on_h2=2)
    try:
        up = tfctl(inv, "up", timeout=600, env=QUICK_END)
        assert up.returncode == 0, up.stdout + up.stderr
        run_id = run_id_from(up.stdout)

        def tasks() -> set[str]:
            return {env.get("TFCTL_TASK", "") for env in processes_of_run(run_id).values()}

        wait_until("h2's watcher stops rank 2", lambda: "worker:2" not in tasks(), 120)
        assert "worker:0" in tasks(), "rank 0 idles on: nothing on h1 sees h2's ranks"
        states = {t["name"]: t["state"] for t in status_json(inv)["tasks"]}
        assert states["worker:2"] == "stopped", states  # by the watcher, not dead by itself
        wait = tfctl(inv, "wait", "--timeout", "120", timeout=300)
        assert wait.returncode == 3, wait.stdout + wait.stderr
        assert "worker:1 on h2 failed (exited 3)" in wait.stdout + wait.stderr
        assert processes_of_run(run_id) == {}
    finally:
        tfctl(inv, "down", "--grace", "1")


def test_restart_restarts_the_whole_group(testbed: Any, frameworks_python: Path,
                                          tmp_path: Path) -> None:
    """`restart: {worker: on-failure}`: rank 1 fails once; rank 0 fails with it in their
    all-reduce; both start again (rank 1 once rank 0's port has closed) and the new group
    all-reduces to its end."""
    once = tmp_path / "failed-once"
    job = {"script": "ddp_rank_fails.py", "framework": "torch",
           "restart": {"worker": "on-failure", "max": 1, "backoff": 1},
           "task_env": {"worker": {"FAIL_RANK": "1", "FAILED_ONCE": str(once)}}}
    up, _, logs = up_wait(testbed, tmp_path, frameworks_python, job, JOBS / "ddp_rank_fails.py")
    assert up.returncode == 0, up.stdout + up.stderr + logs
    assert once.exists()
    for rank in (0, 1):  # rank 0 too: the whole group started again
        assert f"restarting worker:{rank} (restart 1/1)" in logs, logs
    assert "rank 0 all-reduced to 1024" in logs and "rank 1 all-reduced to 1024" in logs, logs
