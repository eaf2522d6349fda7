"""`with_ports` hands a plan the ports `up` chose and keeps the plan it is given: a plan narrowed
to a few tasks stays narrow, and each task's env and argv change only where the framework writes
the ports (the cluster spec, TF_CONFIG, the classic flags)."""

from __future__ import annotations

import json
from dataclasses import replace

from tests.support.inventories import yaml_text
from tfctl.inventory import make_plan, parse_inventory
from tfctl.inventory.plan import with_ports

TWO_HOSTS = "- {name: a, gpus: 2, ps: 1}\n- {name: b, gpus: 1, ps: 0}"
PARAMETER_SERVER = yaml_text(TWO_HOSTS, "strategy: parameter_server\nchief: true\n"
                                        "tensorboard: {host: a}")
FLAGS = yaml_text(TWO_HOSTS, "args: [--steps=5]\nstrategy: flags")


def test_a_narrowed_plan_stays_narrow_and_its_tf_config_names_the_new_ports() -> None:
    plan = make_plan(parse_inventory(PARAMETER_SERVER))
    narrow = replace(plan, tasks=(plan.task("worker:1"), plan.task("tensorboard:0")))

    moved = with_ports(narrow, {"worker:0": 2290, "worker:1": 2291})

    assert [t.name for t in moved.tasks] == ["worker:1", "tensorboard:0"]
    worker = moved.task("worker:1")
    assert worker.port == 2291
    config = json.loads(worker.env["TF_CONFIG"])
    assert config["cluster"]["worker"] == ["a:2290", "a:2291", "b:2223"]
    assert config["cluster"]["ps"] == ["a:2222"] and config["task"] == {"type": "worker",
                                                                         "index": 1}
    assert moved.cluster["worker"] == ["a:2290", "a:2291", "b:2223"]
    assert moved.task("tensorboard:0") == narrow.task("tensorboard:0")
    assert {k: v for k, v in worker.env.items() if k != "TF_CONFIG"} == \
        {k: v for k, v in narrow.task("worker:1").env.items() if k != "TF_CONFIG"}


def test_the_flags_name_the_new_ports_once_and_a_task_keeps_what_it_was_given() -> None:
    plan = make_plan(parse_inventory(FLAGS))
    worker = plan.task("worker:2")
    narrow = replace(plan, tasks=(replace(worker, env={**worker.env, "MINE": "1"}),))

    moved = with_ports(narrow, {"ps:0": 2299})

    (task,) = moved.tasks
    assert task.env["MINE"] == "1" and task.port == worker.port
    assert task.argv == (worker.argv[0], "train.py", "--steps=5", "--ps_hosts=a:2299",
                         "--worker_hosts=a:2223,a:2224,b:2223", "--job_name=worker",
                         "--task_index=2")


def test_only_ports_chosen_at_up_move_and_nothing_chosen_keeps_the_plan() -> None:
    written = PARAMETER_SERVER.replace("chief: true", "chief: true\n  ports: {ps: 2222}")
    plan = make_plan(parse_inventory(written))

    moved = with_ports(plan, {"ps:0": 2250, "chief:0": 2251})

    assert moved.task("ps:0").port == 2222 and moved.task("chief:0").port == 2251
    config = json.loads(moved.task("ps:0").env["TF_CONFIG"])
    assert config["cluster"]["ps"] == ["a:2222"] and config["cluster"]["chief"] == ["a:2251"]
    assert [t.name for t in moved.tasks] == [t.name for t in plan.tasks]
    assert with_ports(plan, {}) is plan
