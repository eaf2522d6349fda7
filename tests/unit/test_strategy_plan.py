"""What `job.strategy` makes of the plan: styles, ps defaults, mirrored's shape, the MWMS chief's
GPUs, task types without ports, and per-host / per-type args and env as `plan --json` shows."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support.inventories import TITAN_GTX, yaml_text
from tfctl.inventory import InventoryError, make_plan, parse_inventory
from tfctl.inventory.plan import Plan


def plan_of(job: str, hosts: str = TITAN_GTX) -> Plan:
    return make_plan(parse_inventory(yaml_text(hosts, job)))


def masks(plan: Plan) -> dict[str, str]:
    return {t.name: t.cuda_visible_devices for t in plan.tasks}


@pytest.mark.parametrize(("job", "style", "ps"), [
    ("strategy: flags", "flags", 1),
    ("strategy: parameter_server\nchief: true", "tf_config", 1),
    ("strategy: multi_worker_mirrored", "tf_config", 0),
    ("strategy: mirrored", "none", 0),
    ("strategy: custom", "tf_config", 1),
    ("strategy: flags\nstyle: flags", "flags", 1),
    ("strategy: custom\nstyle: tf_config", "tf_config", 1),
    ("style: flags", "flags", 1),
    ("chief: false", "tf_config", 1),
])
def test_strategy_decides_style_and_ps_default(job: str, style: str, ps: int) -> None:
    inv = parse_inventory(yaml_text(TITAN_GTX, job))
    assert inv.job.style == style
    assert [h.ps for h in inv.hosts] == [ps, ps]


def test_a_file_without_strategy_resolves_as_before() -> None:
    inv = parse_inventory(yaml_text(TITAN_GTX, "args: [--x=1]"))
    job = inv.job
    assert (job.strategy, job.style, job.workers, job.task_args, job.task_env) == (
        None, "tf_config", "per_gpu", {}, {})
    assert (job.ports.ps, job.ports.worker, job.ports.chief) == (2222, 2223, 2220)
    assert all(h.args == () for h in inv.hosts)


def test_explicit_ps_zero_is_kept_with_any_strategy() -> None:
    inv = parse_inventory(yaml_text("- {name: a, gpus: 1, ps: 0}\n- {name: b, gpus: 1}",
                                    "strategy: parameter_server\nchief: a"))
    assert [h.ps for h in inv.hosts] == [0, 1]


def test_mirrored_is_one_portless_process_per_host_on_all_its_gpus() -> None:
    p = plan_of("strategy: mirrored\nevaluator: {host: cpubox, script: eval.py}",
                TITAN_GTX + "- name: cpubox\n")
    workers = [t for t in p.tasks if t.type == "worker"]
    assert [(t.name, t.host, t.cuda_visible_devices, t.port) for t in workers] == [
        ("worker:0", "titan", "0,1,2,3", None), ("worker:1", "gtx970", "0", None),
        ("worker:2", "cpubox", "", None)]
    assert p.cluster == {}
    for t in p.tasks:
        assert "TF_CONFIG" not in t.env and "GRPC_FAIL_FAST" not in t.env
        assert not any(a.startswith(("--ps_hosts", "--job_name")) for a in t.argv)
    assert workers[0].argv == ("python3", "train.py")
    data = p.to_json()
    assert (data["strategy"], data["style"], data["cluster"]) == ("mirrored", "none", {})
    assert [t["port"] for t in data["tasks"]] == [None] * 4


def test_mirrored_ignores_ports_and_allows_them_none() -> None:
    p = plan_of("strategy: mirrored\nports: {worker: none, ps: 3000}")
    assert {t.port for t in p.tasks} == {None}


def test_mwms_chief_takes_its_hosts_first_gpu_and_trains() -> None:
    p = plan_of("strategy: multi_worker_mirrored\nchief: true")
    assert masks(p) == {"worker:0": "1", "worker:1": "2", "worker:2": "3", "worker:3": "0",
                        "chief:0": "0"}
    assert p.task("chief:0").host == "titan" and p.task("worker:3").host == "gtx970"
    assert p.cluster == {"chief": ["titan:2220"],
                         "worker": ["titan:2223", "titan:2224", "titan:2225", "gtx970:2223"]}
    chief = json.loads(p.task("chief:0").env["TF_CONFIG"])
    assert chief["task"] == {"type": "chief", "index": 0} and "ps" not in chief["cluster"]
    assert "GRPC_FAIL_FAST" not in p.task("chief:0").env


def test_mwms_chief_on_a_named_host_per_host() -> None:
    p = plan_of("strategy: multi_worker_mirrored\nchief: gtx970\nworkers: per_host",
                "- {name: a, gpus: [0, 1]}\n- {name: gtx970, gpus: [2, 3]}")
    assert masks(p) == {"worker:0": "0,1", "chief:0": "2,3"}
    assert p.task("chief:0").port == 2220


def test_parameter_server_chief_stays_off_the_gpus() -> None:
    p = plan_of("strategy: parameter_server\nchief: true")
    assert p.task("chief:0").cuda_visible_devices == ""
    assert [t.name for t in p.tasks if t.type == "worker"] == [f"worker:{i}" for i in range(5)]


@pytest.mark.parametrize("none", ["none", "null", "~"])
def test_custom_task_type_without_a_port(none: str) -> None:
    p = plan_of(f"strategy: custom\nchief: true\nports: {{worker: {none}}}")
    assert {t.port for t in p.tasks if t.type == "worker"} == {None}
    assert p.task("ps:0").port == 2222 and "worker" not in p.cluster
    cfg = json.loads(p.task("worker:1").env["TF_CONFIG"])
    assert cfg["task"] == {"type": "worker", "index": 1}
    assert cfg["cluster"] == {"chief": ["titan:2220"], "ps": ["titan:2222", "gtx970:2222"]}


OVERRIDES = """\
name: lab
defaults:
  env: {LEVEL: defaults, KEEP: "1"}
hosts:
  - name: titan
    gpus: 2
    env: {LEVEL: titan}
  - name: gtx970
    gpus: [0]
    args: [--batch_size=16]
    env: {LEVEL: gtx970, SMALL: "1"}
job:
  script: train.py
  args: [--batch_size=32]
  strategy: parameter_server
  chief: true
  evaluator: {host: gtx970, script: eval.py, args: [--every=60]}
  tensorboard: {host: titan}
  task_args: {worker: [--log_every=5], chief: [--checkpoint_every=50]}
  task_env:
    ps: {LEVEL: ps}
    evaluator: {EVAL: "1"}
    tensorboard: {TB: "1"}
"""


def plan_json(tmp_path: Path, text: str) -> dict[str, Any]:
    f = tmp_path / "cluster.yaml"
    f.write_text(text)
    out = subprocess.run([sys.executable, "-m", "tfctl.tui", "-i", str(f), "plan", "--json"],
                         capture_output=True, text=True, check=True, timeout=60).stdout
    data: dict[str, Any] = json.loads(out)
    return data


def test_plan_json_shows_host_and_type_overrides(tmp_path: Path) -> None:
    tasks = {t["name"]: t for t in plan_json(tmp_path, OVERRIDES)["tasks"]}
    py = ["python3", "train.py", "--batch_size=32"]
    assert tasks["worker:0"]["argv"] == [*py, "--log_every=5"]  # titan
    assert tasks["worker:2"]["argv"] == [*py, "--batch_size=16", "--log_every=5"]  # gtx970
    assert tasks["ps:1"]["argv"][:4] == [*py, "--batch_size=16"]  # every job.script task
    assert tasks["chief:0"]["argv"] == [*py, "--checkpoint_every=50"]
    assert tasks["evaluator:0"]["argv"] == ["python3", "eval.py", "--every=60"]
    env = {name: t["env"] for name, t in tasks.items()}
    assert (env["worker:0"]["LEVEL"], env["worker:2"]["LEVEL"]) == ("titan", "gtx970")
    assert (env["ps:0"]["LEVEL"], env["ps:1"]["LEVEL"]) == ("ps", "ps")  # the type wins
    assert env["worker:2"]["SMALL"] == "1" and env["ps:1"]["KEEP"] == "1"
    assert env["evaluator:0"]["EVAL"] == "1" and "EVAL" not in env["worker:2"]
    assert env["tensorboard:0"]["TB"] == "1"
    assert all("TF_CONFIG" in env[n] for n in env if n != "tensorboard:0")
    assert " --batch_size=16 " in tasks["worker:2"]["command"] + " "


def test_task_env_cannot_override_the_mask() -> None:
    p = plan_of("strategy: parameter_server\nchief: true\n"
                "task_env: {worker: {CUDA_VISIBLE_DEVICES: '7', TF_CONFIG: x}}")
    w = p.task("worker:1")
    assert w.cuda_visible_devices == "1" and w.env["CUDA_VISIBLE_DEVICES"] == "1"
    assert json.loads(w.env["TF_CONFIG"])["task"]["index"] == 1


@pytest.mark.parametrize(("job", "key", "words"), [
    ("task_args: {workers: [--x]}", "job.task_args.workers", "did you mean `worker`"),
    ("task_args: {evaluator: [--x]}", "job.task_args.evaluator", "allowed here: chief, ps"),
    ("task_env: {worker: {1BAD: x}}", "job.task_env.worker.1BAD.[key]", "task_env: {ps:"),
    ("task_args: {worker: --x}", "job.task_args.worker", "task_args: {worker: [--"),
    ("strategy: horovod", "job.strategy", "parameter_server"),
])
def test_override_and_strategy_mistakes_are_located(job: str, key: str, words: str) -> None:
    with pytest.raises(InventoryError) as info:
        parse_inventory(yaml_text(TITAN_GTX, job), "c.yaml")
    e = info.value
    assert e.key_path == key and e.line == 9 and words in str(e), str(e)
