"""`tfctl export slurm`: the sbatch script is valid bash, and run on a fake allocation (the
stand-ins of tests/support/fakes/slurm_standin.py for scontrol, srun and the task's python3) every
task gets what `tfctl plan` gives it, hosts replaced by nodes: TF_CONFIG (exact string) or flags,
the mask, the env, the folder; and the job ends as on the lab."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support import leftovers
from tests.support.export_cases import CASES, GROUP_CASES, inventory, strategy_text
from tests.support.fakes.slurm_standin import expand_hostlist, install_slurm_standins
from tfctl.inventory import InventoryError, make_plan, parse_inventory
from tfctl.inventory.frameworks.gloo import is_found_at_start
from tfctl.inventory.model import Inventory, Slurm
from tfctl.inventory.plan import Plan, Task
from tfctl.remote.exporters.slurm import (
    GROUP_ADDRESS_ENV,
    gpu_positions,
    node_of,
    sbatch_script,
)
from tfctl.remote.runs.endrule import serving_types

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def steps_ended(tmp_path: Path) -> Iterator[None]:
    """A script cut short (a timeout, a failed assertion) leaves its steps running: every
    process given this test's records folder is ended after the test."""
    yield
    records = str(tmp_path / "records")
    leftovers.end(p.pid for p in leftovers.processes_with_env("TFCTL_TEST_RECORDS", records))


def nodelist(n: int) -> str:
    return "gpu07" if n == 1 else f"gpu[07-{6 + n:02d}]"


def in_tmp(inv: Inventory, tmp_path: Path) -> Inventory:
    """Tasks run in `tmp_path` (HOME there for `~/...`; an absolute workdir moved there)."""
    settings = inv.slurm or Slurm()
    workdir = settings.workdir or inv.hosts[0].workdir
    if workdir.startswith("/"):
        settings = dataclasses.replace(settings, workdir=str(tmp_path / "wd"))
        return dataclasses.replace(inv, slurm=settings)
    return inv


def expected_workdir(inv: Inventory, home: Path) -> str:
    plan = make_plan(inv)
    workdir = (inv.slurm and inv.slurm.workdir) or inv.host(plan.hosts_used[0]).workdir
    return str(home / workdir[2:]) if workdir.startswith("~/") else workdir


def on_nodes(plan: Plan, text: str, nodes: list[str]) -> str:
    """`text` with every `address:` of a host of the plan replaced by its node's name."""
    inv = plan.inventory
    hosts = {inv.host(h).address: nodes[i] for h, i in node_of(plan).items()}
    assert len(hosts) == len(node_of(plan)), "each host needs its own address here"
    for address, node in hosts.items():
        text = text.replace(f"\"{address}:", f"\"{node}:").replace(f"={address}:", f"={node}:")
        text = text.replace(f",{address}:", f",{node}:")
    return text


def expected_mask(plan: Plan, task: Task, step_gpus: str | None) -> str:
    positions = gpu_positions(plan.inventory, task)
    have = step_gpus.split(",") if step_gpus else [str(i) for i in range(64)]
    return ",".join(have[p] for p in positions)


def check_record(plan: Plan, task: Task, record: dict[str, Any], nodes: list[str],
                 workdir: str, step_gpus: str | None = None) -> None:
    env = record["env"]
    assert task.argv[0] == "python3"
    assert record["argv"] == [on_nodes(plan, a, nodes) for a in task.argv[1:]], task.name
    assert record["cwd"] == workdir
    assert env["CUDA_VISIBLE_DEVICES"] == expected_mask(plan, task, step_gpus), task.name
    if "TF_CONFIG" in task.env:
        assert env["TF_CONFIG"] == on_nodes(plan, task.env["TF_CONFIG"], nodes), task.name
    else:
        assert "TF_CONFIG" not in env, task.name
    hosts = {plan.address_of(h): nodes[i] for h, i in node_of(plan).items()}
    for key, value in task.env.items():
        if key in GROUP_ADDRESS_ENV.get(plan.inventory.job.framework, ()):
            value = ",".join(hosts.get(a, a) + p for a, p in (
                (part.rpartition(":")[0], ":" + part.rpartition(":")[2]) if ":" in part
                else (part, "") for part in value.split(",")))
        if is_found_at_start(value):  # found by tfctl's agent on a lab host: under Slurm
            assert env.get(key) == os.environ.get(key), (task.name, key)  # left as it is
        elif key not in ("TF_CONFIG", "CUDA_VISIBLE_DEVICES"):
            assert env[key] == value, (task.name, key)
    assert env["TFCTL_TASK"] == task.name


def slurm_env(tmp_path: Path, nodes: int, **extra: str) -> dict[str, str]:
    bin_dir = install_slurm_standins(tmp_path / "bin")
    records = tmp_path / "records"
    records.mkdir(exist_ok=True)
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("SLURM_", "TF_CONFIG", "CUDA_VISIBLE_DEVICES"))}
    env.update(PATH=f"{bin_dir}:{env['PATH']}", HOME=str(home), SLURM_JOB_ID="4242",
               SLURM_JOB_NODELIST=nodelist(nodes), TFCTL_TEST_RECORDS=str(records),
               TFCTL_POLL_S="0.1")
    env.update(extra)
    return env


@pytest.mark.parametrize("case", [*CASES, *GROUP_CASES])
def test_the_script_runs_every_task_as_the_plan_says(case: str, tmp_path: Path) -> None:
    inv = in_tmp(inventory(case, tmp_path), tmp_path)
    plan = make_plan(inv)
    script = tmp_path / "job.sbatch"
    script.write_text(sbatch_script(plan, "job.sbatch"))
    subprocess.run(["bash", "-n", str(script)], check=True)
    n_nodes = len(plan.hosts_used)
    env = slurm_env(tmp_path, n_nodes, TFCTL_TEST_SERVE=",".join(serving_types(plan)),
                    TFCTL_TEST_TASKS=str(len(plan.tasks)))
    started = time.monotonic()
    run = subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True,
                         timeout=120, cwd=tmp_path)
    said = run.stdout + run.stderr
    assert run.returncode == 0, said
    assert time.monotonic() - started < 60, said
    assert "the job has ended (exit 0)" in said
    nodes = expand_hostlist(nodelist(n_nodes))
    workdir = expected_workdir(inv, tmp_path / "home")
    for task in plan.tasks:
        name = task.name.replace(":", "-")
        record = json.loads((tmp_path / "records" / f"{name}.json").read_text())
        check_record(plan, task, record, nodes, workdir)
        assert record["env"]["SLURMD_NODENAME"] == nodes[node_of(plan)[task.host]]
        assert (Path(workdir) / ".tfctl/slurm/4242" / f"{name}.log").exists()
    for folder in inv.job.outputs:
        assert (Path(workdir) / folder).is_dir()
    if serving_types(plan) and any(t.type == "ps" for t in plan.tasks):
        assert "ps:0 ended" in said.split("the job has ended")[1]  # stopped at the end


def test_a_task_run_by_hand_on_its_node_maps_its_gpus_through_slurms(tmp_path: Path) -> None:
    """The launcher alone (`job.sbatch --task N`, what srun runs on the node), as in a step
    where Slurm bound the node's GPUs 4-7 (CUDA_VISIBLE_DEVICES set by Slurm)."""
    inv = in_tmp(inventory("examples/two-hosts.yaml", tmp_path), tmp_path)
    plan = make_plan(inv)
    script = tmp_path / "job.sbatch"
    script.write_text(sbatch_script(plan))
    nodes = expand_hostlist(nodelist(2))
    workdir = expected_workdir(inv, tmp_path / "home")
    Path(workdir).mkdir(parents=True)  # the code's folder (the driver makes it in a real run)
    for n, task in enumerate(plan.tasks):
        node = node_of(plan)[task.host]
        env = slurm_env(tmp_path, 2, SLURM_PROCID="0", SLURM_NODEID=str(node),
                        SLURMD_NODENAME=nodes[node], CUDA_VISIBLE_DEVICES="4,5,6,7")
        run = subprocess.run(["bash", str(script), "--task", str(n)], env=env,
                             capture_output=True, text=True, timeout=60)
        assert run.returncode == 0, run.stderr
        record = json.loads((tmp_path / "records" / f"{task.name.replace(':', '-')}.json")
                            .read_text())
        check_record(plan, task, record, nodes, workdir, step_gpus="4,5,6,7")
    worker3 = plan.task("worker:3")
    assert expected_mask(plan, worker3, "4,5,6,7") == "7"


def test_too_few_gpus_or_nodes_in_the_allocation_are_said(tmp_path: Path) -> None:
    inv = in_tmp(inventory("examples/two-hosts.yaml", tmp_path), tmp_path)
    plan = make_plan(inv)
    script = tmp_path / "job.sbatch"
    script.write_text(sbatch_script(plan))
    n = [t.name for t in plan.tasks].index("worker:1")
    run = subprocess.run(["bash", str(script), "--task", str(n)], capture_output=True,
                         text=True, env=slurm_env(tmp_path, 2, CUDA_VISIBLE_DEVICES="5"))
    assert run.returncode == 2
    assert "worker:1 wants the node's GPU number 2, this step sees 1" in run.stderr
    run = subprocess.run(["bash", str(script)], capture_output=True, text=True,
                         env=slurm_env(tmp_path, 1))
    assert run.returncode == 2
    assert "the job has 1 node(s) (gpu07), its tasks need 2" in run.stderr
    env = slurm_env(tmp_path, 2)
    del env["SLURM_JOB_NODELIST"]
    run = subprocess.run(["bash", str(script)], capture_output=True, text=True, env=env)
    assert run.returncode == 2 and "submit this script with sbatch" in run.stderr


def test_a_failing_decider_is_restarted_then_ends_the_job_with_its_status(
        tmp_path: Path) -> None:
    inv = in_tmp(inventory("mwms-restart", tmp_path), tmp_path)
    script = tmp_path / "job.sbatch"
    script.write_text(sbatch_script(make_plan(inv)))
    env = slurm_env(tmp_path, 2, TFCTL_TEST_EXIT="worker:1=3")
    run = subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True,
                         timeout=60)
    assert run.returncode == 3, run.stdout + run.stderr
    assert "worker:1 ended (exit 3)" in run.stdout
    attempts = (tmp_path / "records" / "worker-1.attempts").read_text()
    assert attempts == "...", "run once, then restarted twice (restart.max: 2)"


def test_a_failed_rank_ends_the_group_and_stops_every_other_rank(tmp_path: Path) -> None:
    """torch: the ranks serve (train) until one fails: the job ends with its status, the other
    ranks are stopped at once, not left to a grace."""
    inv = in_tmp(inventory("torch-ddp", tmp_path), tmp_path)
    script = tmp_path / "job.sbatch"
    script.write_text(sbatch_script(make_plan(inv)))
    env = slurm_env(tmp_path, 3, TFCTL_TEST_SERVE="worker", TFCTL_TEST_EXIT="worker:3=3")
    started = time.monotonic()
    run = subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True,
                         timeout=60)
    assert run.returncode == 3, run.stdout + run.stderr
    assert time.monotonic() - started < 30, "stopped at once, not after the workers' grace"
    said = run.stdout.split("the job has ended (exit 3)")[1]
    assert all(f"stopping worker:{n}" in said for n in (0, 1, 2, 4, 5)), run.stdout


def test_the_sbatch_lines_follow_the_slurm_block_and_its_mistakes_are_named(
        tmp_path: Path) -> None:
    text = strategy_text("flags") + (
        "slurm:\n  partition: gpu\n  account: ml-lab\n  time: '1-12:00:00'\n  nodes: 3\n"
        "  gpus_per_node: 8\n  sbatch_args: [--exclusive, --mem=0]\n  workdir: /scratch/lab\n")
    script = sbatch_script(make_plan(parse_inventory(text)), "lab.sbatch")
    directives = [line for line in script.splitlines() if line.startswith("#SBATCH")]
    assert directives == [
        "#SBATCH --job-name=lab", "#SBATCH --nodes=3", "#SBATCH --ntasks-per-node=5",
        "#SBATCH --gres=gpu:8", "#SBATCH --partition=gpu", "#SBATCH --account=ml-lab",
        "#SBATCH --time=1-12:00:00", "#SBATCH --chdir=/scratch/lab",
        "#SBATCH --output=%x-%j.out", "#SBATCH --exclusive", "#SBATCH --mem=0"]
    body = script.split("\n\n", 1)[1]
    assert not any(line.startswith("#SBATCH") for line in body.splitlines()), \
        "sbatch reads directives only before the first command"
    assert "1 more node(s) stay idle" in script
    default = sbatch_script(make_plan(parse_inventory(strategy_text("flags"))))
    assert "#SBATCH --nodes=2" in default and "#SBATCH --gres=gpu:4" in default
    base = strategy_text("flags")
    for block, key, words in [
        ("slurm: {nodes: 1}", "slurm.nodes", "1 node(s) cannot hold the plan's 2 hosts"),
        ("slurm: {gpus_per_node: 2}", "slurm.gpus_per_node",
         "2 GPUs per node, but worker:3 uses its host's GPU number 4"),
    ]:
        inv = parse_inventory(base + block + "\n", "lab.yaml")
        with pytest.raises(InventoryError) as err:
            sbatch_script(make_plan(inv))
        assert (err.value.key_path, err.value.line) == (key, base.count("\n") + 1)
        assert words in str(err.value)


def test_export_slurm_writes_an_executable_script_or_prints_it(tmp_path: Path) -> None:
    example = ROOT / "examples" / "two-hosts.yaml"
    out = tmp_path / "lab.sbatch"
    cli = [sys.executable, "-m", "tfctl.tui", "-i", str(example), "export", "slurm"]
    run = subprocess.run([*cli, "-o", str(out)], capture_output=True, text=True, check=True)
    assert run.stdout == "" and f"submit it with `sbatch {out}`" in run.stderr
    assert os.access(out, os.X_OK) and out.read_text().startswith("#!/bin/bash\n")
    printed = subprocess.run(cli, capture_output=True, text=True, check=True).stdout
    assert printed == out.read_text().replace("lab.sbatch", "job.sbatch")
