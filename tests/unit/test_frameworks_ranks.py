"""`job.framework: torch | jax`: what each rank is handed (torchrun's variables; JAX's and Keras
3's), the keys only TensorFlow has refused where they are written, and the group's end: rank 0's
end or any rank's failure, on the host's watcher, in the client's status and in a restart."""

from __future__ import annotations

from typing import Any

import pytest

from tfctl.inventory import InventoryError, make_plan, parse_inventory
from tfctl.inventory.plan import with_ports
from tfctl.remote.agent.supervisor import _training_peers
from tfctl.remote.agent.watch import EndJudge, decider_exit_code
from tfctl.remote.runs.endrule import end_rule
from tfctl.remote.runs.failure import explain
from tfctl.remote.runs.status import TaskStatus, fatal_failure, job_ended, job_exit_code

HOSTS = """name: lab
hosts:
  - {name: h1, address: 10.0.0.1, gpus: 2}
  - {name: h2, address: 10.0.0.2, gpus: [1, 3]}
  - {name: cpu, address: "fd00::3", gpus: 0, cpu_workers: 2}
"""


def plan_of(job: str) -> Any:
    return make_plan(parse_inventory(HOSTS + "job:\n  script: train.py\n" + job, "lab.yaml"))


def handed(plan: Any, keys: tuple[str, ...]) -> list[tuple[str, ...]]:
    return [(t.name, t.host, t.cuda_visible_devices, *(t.env.get(k, "-") for k in keys))
            for t in plan.tasks]


TORCH = ("RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "WORLD_SIZE", "MASTER_ADDR",
         "MASTER_PORT", "OMP_NUM_THREADS")
JAX = ("JAX_PROCESS_ID", "JAX_NUM_PROCESSES", "JAX_COORDINATOR_ADDRESS",
       "KERAS_DISTRIBUTION_PROCESS_ID", "KERAS_DISTRIBUTION_NUM_PROCESSES",
       "KERAS_DISTRIBUTION_JOB_ADDRESSES")
ADDRESSES = "10.0.0.1:2223,10.0.0.2:2223,[fd00::3]:2223,[fd00::3]:2223"


@pytest.mark.parametrize(("job", "keys", "rows"), [
    ("  framework: torch\n", TORCH, [  # per_gpu: every rank of a host sees its GPUs
        ("worker:0", "h1", "0,1", "0", "0", "2", "0", "6", "10.0.0.1", "2223", "1"),
        ("worker:1", "h1", "0,1", "1", "1", "2", "0", "6", "10.0.0.1", "2223", "1"),
        ("worker:2", "h2", "1,3", "2", "0", "2", "1", "6", "10.0.0.1", "2223", "1"),
        ("worker:3", "h2", "1,3", "3", "1", "2", "1", "6", "10.0.0.1", "2223", "1"),
        ("worker:4", "cpu", "", "4", "0", "2", "2", "6", "10.0.0.1", "2223", "1"),
        ("worker:5", "cpu", "", "5", "1", "2", "2", "6", "10.0.0.1", "2223", "1")]),
    ("  framework: torch\n  workers: per_host\n  ports: {worker: 29500}\n", TORCH[:-1], [
        ("worker:0", "h1", "0,1", "0", "0", "1", "0", "4", "10.0.0.1", "29500"),
        ("worker:1", "h2", "1,3", "1", "0", "1", "1", "4", "10.0.0.1", "29500"),
        ("worker:2", "cpu", "", "2", "0", "2", "2", "4", "10.0.0.1", "29500"),
        ("worker:3", "cpu", "", "3", "1", "2", "2", "4", "10.0.0.1", "29500")]),
    ("  framework: jax\n", JAX, [  # per_host by default
        ("worker:0", "h1", "0,1", "0", "4", "10.0.0.1:2223", "0", "4", ADDRESSES),
        ("worker:1", "h2", "1,3", "1", "4", "10.0.0.1:2223", "1", "4", ADDRESSES),
        ("worker:2", "cpu", "", "2", "4", "10.0.0.1:2223", "2", "4", ADDRESSES),
        ("worker:3", "cpu", "", "3", "4", "10.0.0.1:2223", "3", "4", ADDRESSES)]),
    ("  framework: jax\n  workers: per_gpu\n", JAX[:3], [  # per_gpu: each sees its own GPU
        ("worker:0", "h1", "0", "0", "6", "10.0.0.1:2223"),
        ("worker:1", "h1", "1", "1", "6", "10.0.0.1:2223"),
        ("worker:2", "h2", "1", "2", "6", "10.0.0.1:2223"),
        ("worker:3", "h2", "3", "3", "6", "10.0.0.1:2223"),
        ("worker:4", "cpu", "", "4", "6", "10.0.0.1:2223"),
        ("worker:5", "cpu", "", "5", "6", "10.0.0.1:2223")]),
])
def test_each_rank_is_handed_its_frameworks_variables(job: str, keys: tuple[str, ...],
                                                      rows: list[tuple[str, ...]]) -> None:
    plan = plan_of(job)
    assert handed(plan, keys) == rows
    rank0 = 29500 if "29500" in job else 2223  # only rank 0 opens a port
    assert [t.port for t in plan.tasks] == [rank0] + [None] * (len(rows) - 1)
    assert all("TF_CONFIG" not in t.env for t in plan.tasks)


def test_the_defaults_it_sets_give_way_to_the_inventorys_and_new_ports_hand_new_values() -> None:
    plan = plan_of("  framework: jax\n  task_env: {worker: {KERAS_BACKEND: torch}}\n")
    assert {t.env["KERAS_BACKEND"] for t in plan.tasks} == {"torch"}
    assert {t.env["JAX_CPU_COLLECTIVES_IMPLEMENTATION"] for t in plan.tasks} == {"gloo"}
    moved = with_ports(plan, {"worker:0": 2250})
    assert moved.task("worker:0").port == 2250
    assert {t.env["JAX_COORDINATOR_ADDRESS"] for t in moved.tasks} == {"10.0.0.1:2250"}
    torch = with_ports(plan_of("  framework: torch\n"), {"worker:0": 2251})
    assert {t.env["MASTER_PORT"] for t in torch.tasks} == {"2251"}
    assert torch.inventory.job.restart.together, "DDP ranks restart together by default"
    board = plan_of("  framework: torch\n  tensorboard: {host: h2, logdir: runs}\n").tasks[-1]
    assert (board.type, board.host, board.port) == ("tensorboard", "h2", 6006)
    assert "MASTER_ADDR" not in board.env, "TensorBoard is tfctl's own: handed nothing"


@pytest.mark.parametrize(("job", "key", "words"), [
    ("  framework: torch\n  strategy: multi_worker_mirrored\n", "job.strategy",
     "`strategy:` is TensorFlow's: a PyTorch job is one process group, and rank 0"),
    ("  framework: torch\n  chief: true\n", "job.chief",
     "a PyTorch job has no chief: rank 0 (worker:0, on the first host) is its coordinator"),
    ("  framework: jax\n  style: flags\n", "job.style", "JAX's ranks are handed"),
    ("  framework: jax\n  keras: legacy\n", "job.keras", "`keras: legacy` is tf_keras"),
    ("  framework: torch\n  ports: {ps: 2300}\n", "job.ports.ps",
     "write `ports: {worker: N}` for rank 0's port"),
    ("  framework: pytorch\n", "job.framework", "write `framework: tensorflow`, `torch` or"),
])
def test_what_only_tensorflow_has_is_refused_where_it_is_written(job: str, key: str,
                                                                   words: str) -> None:
    with pytest.raises(InventoryError) as err:
        plan_of(job)
    assert err.value.key_path == key and words in str(err.value), str(err.value)
    assert err.value.line is not None


def test_a_parameter_server_is_refused_on_its_host() -> None:
    text = HOSTS.replace("gpus: [1, 3]}", "gpus: [1, 3], ps: 1}")
    with pytest.raises(InventoryError) as err:
        parse_inventory(text + "job: {script: t.py, framework: torch}\n", "lab.yaml")
    assert err.value.key_path == "hosts[1].ps" and err.value.line == 4
    assert "PyTorch has no parameter servers" in str(err.value) and "remove `ps:`" in str(
        err.value)


def rule_for(job: str) -> dict[str, Any]:
    return end_rule(plan_of(job), 180.0)


def test_the_watcher_ends_a_group_with_rank_0_or_with_a_rank_that_failed_here() -> None:
    rule = rule_for("  framework: torch\n")
    assert rule["mode"] == "group" and rule["serving"] == ["ps"]
    assert [(d["name"], d["port"]) for d in rule["deciders"][:2]] == [("worker:0", 2223),
                                                                       ("worker:1", None)]
    on_h2 = EndJudge(rule, "h2", 0.0)
    on_h2.was_up = True
    assert [d["name"] for d in on_h2.deciders] == ["worker:0", "worker:2", "worker:3"]

    def open_port(address: str, port: int) -> tuple[str, str]:
        return "open", "accepted"

    ok, failed = {"exit_code": 0, "signal": None}, {"exit_code": 3, "signal": None}
    assert on_h2.verdict({"worker:2": ok}, 1.0, open_port) is None, "a rank that succeeded"
    assert on_h2.verdict({"worker:3": failed}, 2.0, open_port) == \
        "worker:3 failed (exit 3): the group cannot go on without it"
    assert on_h2.verdict({}, 3.0, lambda a, p: ("refused", "Connection refused")) is None
    assert on_h2.verdict({}, 30.0, lambda a, p: ("refused", "Connection refused")) == \
        "worker:0 ended", "rank 0's port closed for good"


def test_the_groups_exit_status_is_its_failed_ranks(tmp_path: Any) -> None:
    import json

    from tfctl.remote.agent.rundir import task_file

    manifest = {"host": "h2", "end": rule_for("  framework: torch\n")}
    for name, code in (("worker:2", 0), ("worker:3", 3)):
        with open(task_file(str(tmp_path), name, ".exit.json"), "w") as fh:
            json.dump({"exit_code": code, "signal": None}, fh)
    assert decider_exit_code(str(tmp_path), manifest) == 3


def status(name: str, state: str, code: int | None = None) -> TaskStatus:
    return TaskStatus.from_wire({"name": name, "type": "worker", "index": int(name[-1]),
                                 "state": state, "exit_code": code})


def test_the_client_stops_the_group_when_any_rank_failed() -> None:
    tasks = (status("worker:0", "running"), status("worker:1", "exited", 0),
             status("worker:2", "exited", 4))
    assert fatal_failure(tasks, "worker:0", group=True) == tasks[2]
    assert job_ended(tasks, "worker:0", group=True) and job_exit_code(tasks, "worker:0", True) == 4
    assert not job_ended(tasks[:2], "worker:0", group=True), "rank 0 still trains"


@pytest.mark.parametrize(("env", "peers"), [
    ({"MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "2223", "RANK": "3"}, [("10.0.0.1", 2223)]),
    ({"MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "2223", "RANK": "0"}, []),
    ({"JAX_COORDINATOR_ADDRESS": "[fd00::3]:2223", "JAX_PROCESS_ID": "1"}, [("fd00::3", 2223)]),
])
def test_a_rank_restarting_together_waits_for_rank_0(env: dict[str, str],
                                                       peers: list[tuple[str, int]]) -> None:
    assert _training_peers(env) == peers


@pytest.mark.parametrize(("line", "words"), [
    ("RuntimeError: Distributed package doesn't have NCCL built in",
     'use `init_process_group("gloo")`'),
    ("ValueError: Number of processes must be defined.", 'int(os.environ["JAX_NUM_PROCESSES"])'),
    ("RuntimeError: Multiprocess computations aren't implemented on the CPU backend.",
     "JAX_CPU_COLLECTIVES_IMPLEMENTATION: gloo"),
])
def test_the_known_failures_of_torch_and_jax_get_their_fix(line: str, words: str) -> None:
    hint = explain(["Traceback (most recent call last):", '  File "train.py", line 3', line]).hint
    assert hint is not None and words in hint, hint
