"""The framework seam holds a framework that is not TensorFlow: one process per GPU, no ps and no
chief, a coordinator at the first worker's cluster address on a port chosen like the others, and
an env of its own per task (torchrun's shape). Registered for the test only: the plan builder,
`with_ports` and the rules take it without a line of their own.

And a third framework of ranks as a new one would come (Horovod's or DeepSpeed's launcher): its
entry (a `ranks.Ranks` with what it alone hands and says) and its registry line, here a
`FRAMEWORKS` item set by the test, are all it takes for the loader (its name, its keys, its
default layout), the plan, the end rule, `status`, `check`'s judgements and exposure, and
`tfctl plan`'s header to take it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import pytest

from tfctl.inventory import make_plan, parse_inventory
from tfctl.inventory.checks import ErrorFactory
from tfctl.inventory.errors import InventoryError
from tfctl.inventory.frameworks import FRAMEWORKS, ranks
from tfctl.inventory.frameworks.interface import (
    Cluster,
    Handed,
    Hint,
    JobKeys,
    Level,
    Refusal,
    host_port,
    numbered,
    worker_masks,
)
from tfctl.inventory.model import Inventory, Job, Ports, WorkerLayout
from tfctl.inventory.plan import Plan, with_ports
from tfctl.inventory.rules import refusals
from tfctl.inventory.schema import HostSpec, JobSpec
from tfctl.inventory.tasks import COMMON_ENV, Place, TaskType


class OneGroup:
    """A stand-in shaped like torchrun's: every worker in one group around worker 0."""

    name: str = "onegroup"
    title: str = "OneGroup"
    roles: tuple[TaskType, ...] = ("worker",)
    cluster_roles: tuple[TaskType, ...] = ("worker",)
    layouts: tuple[WorkerLayout, ...] = ("per_gpu", "per_host")
    asks_host: tuple[str, ...] = ()
    hints: tuple[Hint, ...] = ()
    one_group: bool = True

    def resolve_job(self, job: JobSpec, error: ErrorFactory) -> JobKeys:
        return JobKeys("env", job.workers or self.layouts[0], Ports(), together=True)

    def host_ps(self, i: int, host: HostSpec, job: JobSpec | None, error: ErrorFactory) -> int:
        return 0

    def summary(self, job: Job) -> str:
        return self.title

    def base_env(self, job: Job) -> dict[str, str]:
        return dict(COMMON_ENV)

    def place(self, inv: Inventory, addresses: Mapping[str, str]) -> list[Place]:
        places = [Place("worker", 0, h.name, addresses[h.name], None, mask)
                  for h in inv.hosts for mask in worker_masks(h, inv.job.workers)]
        places[0] = replace(places[0], port=inv.job.ports.worker)  # the coordinator's
        return numbered(places, inv.job.ports.chosen_at_up)

    def spec(self, places: Sequence[Place]) -> dict[str, list[str]]:
        first = places[0]
        return {"worker": [host_port(first.address, first.port or 0)]}

    def hand(self, job: Job, place: Place, cluster: Cluster) -> Handed:
        workers = [p for p in cluster.places if p.type == "worker"]
        hosts = list(dict.fromkeys(p.host for p in workers))
        local = [p for p in workers if p.host == place.host]
        return Handed(env={
            "MASTER_ADDR": workers[0].address, "MASTER_PORT": str(workers[0].port),
            "WORLD_SIZE": str(len(workers)), "RANK": str(place.index),
            "LOCAL_RANK": str(local.index(place)), "LOCAL_WORLD_SIZE": str(len(local)),
            "GROUP_RANK": str(hosts.index(place.host))})

    def refusals(self, plan: Plan) -> list[Refusal]:
        return []

    def warnings(self, plan: Plan) -> tuple[str, ...]:
        return ()

    def judge_install(self, probe: Mapping[str, Any]) -> list[tuple[Level, str]]:
        return []

    def judge_import(self, probe: Mapping[str, Any], wanted: tuple[int, ...],
                     job: Job) -> list[tuple[Level, str]]:
        return []


LAB = """
name: t
hosts:
  - {name: a, gpus: 2, ps: 0, cluster_address: 10.0.0.1}
  - {name: b, gpus: 1, ps: 0, cluster_address: 10.0.0.2}
job: {script: ddp.py, tensorboard: {host: b}}
"""


@pytest.fixture
def onegroup(monkeypatch: pytest.MonkeyPatch) -> Inventory:
    monkeypatch.setitem(FRAMEWORKS, "onegroup", OneGroup())
    inv = parse_inventory(LAB)
    return replace(inv, job=replace(inv.job, framework="onegroup"))


def test_each_process_gets_the_frameworks_env_and_no_tensorflow(onegroup: Inventory) -> None:
    plan = make_plan(onegroup)

    assert [t.name for t in plan.tasks] == ["worker:0", "worker:1", "worker:2", "tensorboard:0"]
    envs = [dict(t.env) for t in plan.tasks[:3]]
    assert [(e["RANK"], e["LOCAL_RANK"], e["LOCAL_WORLD_SIZE"], e["GROUP_RANK"],
             e["CUDA_VISIBLE_DEVICES"]) for e in envs] == [
        ("0", "0", "2", "0", "0"), ("1", "1", "2", "0", "1"), ("2", "0", "1", "1", "0")]
    assert {(e["MASTER_ADDR"], e["MASTER_PORT"], e["WORLD_SIZE"]) for e in envs} == {
        ("10.0.0.1", "2223", "3")}
    assert not any(k.startswith("TF_") for t in plan.tasks for k in t.env)
    assert plan.tasks[0].argv[1:] == ("ddp.py",)
    assert [t.port for t in plan.tasks] == [2223, None, None, 6006]


def test_a_coordinator_port_chosen_at_up_reaches_every_process(onegroup: Inventory) -> None:
    plan = make_plan(onegroup)
    assert plan.task("worker:0").port_chosen_at_up

    moved = with_ports(plan, {"worker:0": 2290})

    assert {t.env["MASTER_PORT"] for t in moved.tasks[:3]} == {"2290"}
    assert moved.task("worker:0").port == 2290 and moved.cluster == {"worker": ["10.0.0.1:2290"]}
    assert moved.task("tensorboard:0") == plan.task("tensorboard:0")


def test_roles_the_framework_lacks_are_refused(onegroup: Inventory) -> None:
    with_ps = replace(onegroup, hosts=(replace(onegroup.hosts[0], ps=1), onegroup.hosts[1]))
    with_chief = replace(onegroup, job=replace(onegroup.job, chief="a"))

    assert [f.message for f in refusals(make_plan(with_ps))] == [
        "OneGroup has no parameter servers"]
    assert [f.message for f in refusals(make_plan(with_chief))] == ["OneGroup has no chief"]
    assert refusals(make_plan(onegroup)) == []


class Gang(ranks.Ranks):
    """A launcher's ranks (Horovod's shape): one process per host by default, each told its
    rank, the group's size and rank 0's address in variables of its own."""

    name: str = "gang"
    title: str = "Gang"
    module: str = "gang"
    install: str = "pip install gang"
    layouts: tuple[WorkerLayout, ...] = ("per_host", "per_gpu")  # per_host first: its default
    asks_host: tuple[str, ...] = ("gang",)
    shown_env: tuple[str, ...] = ("GANG_RANK",)
    hints: tuple[Hint, ...] = ()

    def hand(self, job: Job, place: Place, cluster: Cluster) -> Handed:
        if place.type != "worker":
            return Handed()
        r = ranks.Rank(place, cluster.places)
        port = r.coordinator.port
        assert port is not None
        return Handed(env={"GANG_RANK": str(r.rank), "GANG_SIZE": str(r.world_size),
                           "GANG_COORDINATOR": host_port(r.coordinator.address, port)})

    def judge_imported(self, said: Mapping[str, Any],
                       wanted: tuple[int, ...]) -> list[tuple[Level, str]]:
        return [("ok", f"Gang {said.get('version')}"),
                *ranks.too_few_gpus("Gang", said, wanted, "install gang[cuda] there")]


GANG_LAB = """
name: g
hosts:
  - {name: a, gpus: 2, cluster_address: 10.0.0.1}
  - {name: b, gpus: 1, cluster_address: 10.0.0.2}
job: {script: train.py, framework: gang}
"""


@pytest.fixture
def gang(monkeypatch: pytest.MonkeyPatch) -> Inventory:
    monkeypatch.setitem(FRAMEWORKS, "gang", Gang())
    return parse_inventory(GANG_LAB)


def test_a_new_entry_is_loaded_by_its_name_with_its_own_default_layout(gang: Inventory) -> None:
    job = gang.job

    assert (job.framework, job.style, job.workers) == ("gang", "env", "per_host")
    assert job.restart.together and job.ports.chosen_at_up == ("worker",)
    assert [h.ps for h in gang.hosts] == [0, 0]


@pytest.mark.parametrize(("line", "where", "words"), [
    ("job: {script: t.py, framework: gang, strategy: mirrored}", "job.strategy",
     "a Gang job is one process group"),
    ("job: {script: t.py, framework: gang, chief: a}", "job.chief", "a Gang job has no chief"),
    ("job: {script: t.py, framework: nope}", "job.framework",
     "Input should be 'tensorflow', 'torch', 'jax' or 'gang'"),
])
def test_a_new_entry_refuses_what_it_cannot_honour_where_it_is_written(
        gang: Inventory, line: str, where: str, words: str) -> None:
    with pytest.raises(InventoryError) as refused:
        parse_inventory(GANG_LAB.replace("job: {script: train.py, framework: gang}", line))

    assert refused.value.key_path == where and words in str(refused.value)


def test_a_new_entry_plans_ends_and_is_checked_as_one_group(gang: Inventory) -> None:
    from tfctl.remote.runs.check import CheckFinding
    from tfctl.remote.runs.endrule import deciders
    from tfctl.remote.runs.status import acting_chief_of
    from tfctl.tui.cli.check import GROUP_EXPOSURE_WARNING, exposure

    plan = make_plan(gang)
    gang_entry = FRAMEWORKS["gang"]

    assert [(t.name, t.env["GANG_RANK"], t.env["GANG_SIZE"], t.env["GANG_COORDINATOR"])
            for t in plan.tasks] == [("worker:0", "0", "2", "10.0.0.1:2223"),
                                     ("worker:1", "1", "2", "10.0.0.1:2223")]
    tasks, mode = deciders(plan)
    assert (mode, [t.name for t in tasks]) == ("group", ["worker:0", "worker:1"])
    assert acting_chief_of(gang.job) == "worker:0"
    assert exposure(plan) == GROUP_EXPOSURE_WARNING
    assert gang_entry.summary(gang.job) == "Gang"
    probe = {"executable": "/usr/bin/python3", "framework_versions": {},
             "frameworks": {"gang": {"importable": True, "version": "1.2", "gpus": ["g0"]}}}
    assert [CheckFinding(*f) for f in gang_entry.judge_install(probe)] == [CheckFinding(
        "fail", "Gang is not installed for /usr/bin/python3: install it there (pip install "
        "gang) or point `python:` at an interpreter that has it")]
    assert gang_entry.judge_import(probe, (0, 1), gang.job) == [
        ("ok", "Gang 1.2"),
        ("fail", "Gang sees 1 GPU(s) but the inventory selects 2: install gang[cuda] there")]


def test_the_slurm_script_refuses_a_group_whose_variables_it_cannot_compute(
        gang: Inventory) -> None:
    from tfctl.remote.exporters.slurm import sbatch_script

    with pytest.raises(InventoryError) as refused:
        sbatch_script(make_plan(gang))

    assert refused.value.key_path == "job.framework"
    assert "cannot hand Gang's ranks rank 0's address" in str(refused.value)
