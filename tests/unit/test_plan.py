"""The cluster plan: ordering, ports, masks, TF_CONFIG and classic flags, and `tfctl plan`."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import yaml

from tfctl.inventory import make_plan, parse_inventory

EXAMPLE = Path(__file__).parents[2] / "examples" / "two-hosts.yaml"
PS_HOSTS = "192.168.0.80:2222"
WORKER_HOSTS = ("192.168.0.80:2223,192.168.0.80:2224,192.168.0.80:2225,192.168.0.80:2226,"
                "192.168.0.20:2223")


def tfctl(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tfctl.tui", *args], capture_output=True,
                          text=True, check=True)


def inv(job: str, hosts: str = "[{name: a, gpus: 2}, {name: b, gpus: 0, ps: 0}]") -> object:
    return parse_inventory(f"name: t\nhosts: {hosts}\njob: {job}\n")


def test_plan_json_gives_classic_host_strings() -> None:
    data = json.loads(tfctl("-i", str(EXAMPLE), "plan", "--json").stdout)
    assert ",".join(data["cluster"]["ps"]) == PS_HOSTS
    assert ",".join(data["cluster"]["worker"]) == WORKER_HOSTS
    names = [t["name"] for t in data["tasks"]]
    assert names == ["ps:0", *[f"worker:{i}" for i in range(5)], "chief:0",
                     "evaluator:0", "tensorboard:0"]
    assert data["strategy"] == "parameter_server" and data["style"] == "tf_config"
    for t in data["tasks"]:
        assert {"name", "type", "index", "host", "address", "port", "cuda_visible_devices",
                "env", "cwd", "command"} <= set(t)
    masks = {t["name"]: t["cuda_visible_devices"] for t in data["tasks"]}
    assert masks == {"ps:0": "", "worker:0": "0", "worker:1": "1", "worker:2": "2",
                     "worker:3": "3", "worker:4": "0", "chief:0": "", "evaluator:0": "",
                     "tensorboard:0": ""}


def test_plan_table_prints_host_strings() -> None:
    out = tfctl("-i", str(EXAMPLE), "plan").stdout
    assert f"ps_hosts={PS_HOSTS}" in out and f"worker_hosts={WORKER_HOSTS}" in out


def test_the_readme_says_what_its_example_plans_and_the_example_plans_cleanly() -> None:
    """The README's first command, on the file its inventory block shows: the host strings it
    states, and no warning (the example a user copies walks into no trap)."""
    readme = (EXAMPLE.parent.parent / "README.md").read_text()
    said = readme[readme.index("This file is [`examples/two-hosts.yaml`]"):]
    ps, workers = (re.search(rf"`{key}=([^`]+)`", said) for key in ("ps_hosts", "worker_hosts"))
    assert ps is not None and workers is not None
    out = tfctl("-i", str(EXAMPLE), "plan").stdout
    assert f"ps_hosts={ps.group(1)}" in out and f"worker_hosts={workers.group(1)}" in out
    assert "warning" not in out, out
    assert json.loads(tfctl("-i", str(EXAMPLE), "plan", "--json").stdout)["warnings"] == []
    block = re.search(r"```yaml\n(name: lab  .*?)```", readme, re.S)
    assert block is not None  # the README's inventory block shows the same hosts
    assert yaml.safe_load(block.group(1))["hosts"] == yaml.safe_load(EXAMPLE.read_text())["hosts"]


def test_tf_config_env_per_task() -> None:
    p = make_plan(inv("{script: t.py, chief: true}"))  # type: ignore[arg-type]
    worker1 = json.loads(p.task("worker:1").env["TF_CONFIG"])
    assert worker1["task"] == {"type": "worker", "index": 1}
    assert worker1["cluster"] == {"chief": ["a:2220"], "ps": ["a:2222"],
                                  "worker": ["a:2223", "a:2224", "b:2223"]}
    assert p.task("worker:2").cuda_visible_devices == ""  # the CPU-only host
    assert p.task("chief:0").cuda_visible_devices == ""
    assert p.task("ps:0").env["GRPC_FAIL_FAST"] == "use_caller"
    assert p.task("worker:0").env["TF_FORCE_GPU_ALLOW_GROWTH"] == "true"


def test_flags_style_argv() -> None:
    p = make_plan(inv("{script: t.py, args: [--x=1], style: flags}"))  # type: ignore[arg-type]
    assert p.task("worker:1").argv == ("python3", "t.py", "--x=1", "--ps_hosts=a:2222",
                                       "--worker_hosts=a:2223,a:2224,b:2223",
                                       "--job_name=worker", "--task_index=1")
    assert "TF_CONFIG" not in p.task("worker:1").env


def test_per_host_layout_and_gpu_list() -> None:
    p = make_plan(inv("{script: t.py, workers: per_host}",  # type: ignore[arg-type]
                      "[{name: a, gpus: [1, 3]}, {name: b, gpus: 0}]"))
    assert [(t.name, t.cuda_visible_devices) for t in p.tasks if t.type == "worker"] == [
        ("worker:0", "1,3"), ("worker:1", "")]


def test_user_env_overrides_base_but_not_mask() -> None:
    p = make_plan(parse_inventory(
        "name: t\ndefaults: {env: {TF_FORCE_GPU_ALLOW_GROWTH: 'false', CUDA_VISIBLE_DEVICES: '7'}}"
        "\nhosts: [{name: a, gpus: 1}]\njob: {script: t.py}\n"))
    w = p.task("worker:0")
    assert w.env["TF_FORCE_GPU_ALLOW_GROWTH"] == "false" and w.env["CUDA_VISIBLE_DEVICES"] == "0"


def test_evaluator_tf_config_is_outside_the_cluster() -> None:
    p = make_plan(inv("{script: t.py, chief: true, evaluator: {host: b, script: e.py}}"))  # type: ignore[arg-type]
    ev = p.task("evaluator:0")
    cfg = json.loads(ev.env["TF_CONFIG"])
    assert cfg["task"] == {"type": "evaluator", "index": 0} and "evaluator" not in cfg["cluster"]
    assert ev.cuda_visible_devices == "" and ev.argv == ("python3", "e.py")
