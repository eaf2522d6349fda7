"""`tfctl export tfjob`: the manifest is a valid `kubeflow.org/v1` TFJob (the CRD's
openAPIV3Schema from kubeflow/training-operator v1.9.0, tests/support/data/kubeflow/, with no field
the API server would prune), and the TF_CONFIG the operator gives each replica is the one
`tfctl plan` gives the same task: same task types, counts and indices, pods for hosts. In the
flags style the container's entrypoint is run on that TF_CONFIG and must pass the plan's flags."""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from tests.support.export_cases import CASES, GROUP_CASES, inventory
from tfctl.inventory import InventoryError, make_plan, parse_inventory
from tfctl.inventory.model import Inventory, Kubernetes, RestartPolicy
from tfctl.inventory.plan import Plan, Task
from tfctl.remote.exporters.tfjob import (
    REPLICA_TYPES,
    gpu_count,
    notes,
    operator_tf_config,
    pod_env,
    script_argv,
    tfjob_manifest,
    tfjob_yaml,
)

CRD = (Path(__file__).resolve().parents[1] / "support" / "data" / "kubeflow"
       / "kubeflow.org_tfjobs.yaml")
ROOT = Path(__file__).resolve().parents[2]
# kubeflow/training-operator v1.9.0 pkg/apis/kubeflow.org/v1/common_types.go
RESTART_POLICIES = {"Always", "OnFailure", "Never", "ExitCode"}
CLEAN_POD_POLICIES = {"", "All", "Running", "None"}


@functools.cache
def schema() -> dict[str, Any]:
    crd = yaml.load(CRD.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    (version,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1"]
    return version["schema"]["openAPIV3Schema"]  # type: ignore[no-any-return]


def pruned(value: Any, node: dict[str, Any], where: str = "") -> list[str]:
    """Fields of `value` the API server would drop as unknown to the structural schema."""
    found: list[str] = []
    if node.get("x-kubernetes-preserve-unknown-fields"):
        return found
    if isinstance(value, dict) and node.get("type") == "object":
        props = node.get("properties")
        extra = node.get("additionalProperties")
        for key, item in value.items():
            if props is not None and key in props:
                found += pruned(item, props[key], f"{where}.{key}")
            elif isinstance(extra, dict):
                found += pruned(item, extra, f"{where}.{key}")
            elif props is not None:
                found.append(f"{where}.{key}")
    elif isinstance(value, list) and "items" in node:
        for i, item in enumerate(value):
            found += pruned(item, node["items"], f"{where}[{i}]")
    return found


def with_image(inv: Inventory) -> Inventory:
    if inv.kubernetes is not None and inv.kubernetes.image is not None:
        return inv
    return dataclasses.replace(inv, kubernetes=Kubernetes(image="registry.example.org/t:1"))


def endpoint(manifest: dict[str, Any], task_type: str, index: int, port: int) -> str:
    meta = manifest["metadata"]
    return f"{meta['name']}-{task_type}-{index}.{meta['namespace']}.svc:{port}"


def first_port(manifest: dict[str, Any], replica: str) -> int:
    spec = manifest["spec"]["tfReplicaSpecs"][replica]["template"]["spec"]
    ports = spec["containers"][0].get("ports", [])
    return int(ports[0]["containerPort"]) if ports else 2222


def run_entrypoint(command: list[str], tf_config: str | None, tmp_path: Path,
                   script: str) -> dict[str, Any]:
    """The container's command here (python3 → this interpreter), in a folder where the
    task's script only reports what it was given."""
    (tmp_path / script).parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / script).write_text(
        "import json, os, sys\n"
        "print(json.dumps({'argv': sys.argv, 'tf_config': os.environ.get('TF_CONFIG')}))\n")
    env = {k: v for k, v in os.environ.items() if k != "TF_CONFIG"}
    if tf_config is not None:
        env["TF_CONFIG"] = tf_config
    out = subprocess.run([sys.executable, *command[1:]], cwd=tmp_path, env=env, check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out)  # type: ignore[no-any-return]


def check_replica(plan: Plan, manifest: dict[str, Any], task: Task, pod: Task,
                  tmp_path: Path) -> None:
    """What the operator and the entrypoint make of pod `task.index` of its type, whose
    template is `pod`'s (the type's first task: a TFJob has one template per type)."""
    replica = REPLICA_TYPES[task.type]
    given = operator_tf_config(manifest, replica, task.index)
    container = manifest["spec"]["tfReplicaSpecs"][replica]["template"]["spec"]["containers"][0]
    style = plan.inventory.job.style
    if given is not None:
        config = json.loads(given)
        cluster = {k: v for k, v in config["cluster"].items() if k != "evaluator"}
        assert config["task"] == {"type": task.type, "index": task.index}
        if style == "tf_config":
            assert "TF_CONFIG" in task.env
            planned = json.loads(task.env["TF_CONFIG"])
            assert config["task"] == planned["task"]
            members = {t for t in REPLICA_TYPES if t != "evaluator"}
            assert {k: len(v) for k, v in cluster.items()} == {
                t: sum(1 for x in plan.tasks if x.type == t) for t in members
                if any(x.type == t for x in plan.tasks)}
            for t, addresses in planned["cluster"].items():  # the plan's, pods for hosts
                assert len(addresses) == len(cluster[t])
                port = first_port(manifest, REPLICA_TYPES[t])
                assert cluster[t] == [endpoint(manifest, t, i, port)
                                      for i in range(len(addresses))]
    seen = run_entrypoint(container["command"], given, tmp_path, pod.argv[1])
    if style == "flags" and task.type in ("ps", "worker"):
        assert given is not None
        cluster = json.loads(given)["cluster"]
        assert seen["argv"][:-4] == list(pod.argv[1:-4])
        assert seen["argv"][-4:] == [f"--ps_hosts={','.join(cluster.get('ps', []))}",
                                     f"--worker_hosts={','.join(cluster['worker'])}",
                                     f"--job_name={task.type}", f"--task_index={task.index}"]
        planned_flags = task.argv[-4:]
        for flag, got in zip(planned_flags[:2], seen["argv"][-4:-2], strict=True):
            assert flag.count(",") == got.count(","), (flag, got)  # as many hosts
        assert seen["tf_config"] is None
    else:
        assert seen["argv"] == list(pod.argv[1:])
        assert (seen["tf_config"] is not None) == ("TF_CONFIG" in task.env)


@pytest.mark.parametrize("case", CASES)
def test_the_tfjob_is_valid_and_gives_every_task_what_the_plan_does(case: str,
                                                                     tmp_path: Path) -> None:
    plan = make_plan(with_image(inventory(case, tmp_path)))
    manifest = tfjob_manifest(plan)
    assert yaml.safe_load(tfjob_yaml(plan)) == manifest
    jsonschema.Draft7Validator(schema()).validate(manifest)
    assert pruned(manifest, schema()) == []
    assert (manifest["apiVersion"], manifest["kind"]) == ("kubeflow.org/v1", "TFJob")
    spec = manifest["spec"]
    assert spec["runPolicy"]["cleanPodPolicy"] in CLEAN_POD_POLICIES
    restart = plan.inventory.job.restart
    for task_type, replica in REPLICA_TYPES.items():
        tasks = [t for t in plan.tasks if t.type == task_type]
        if not tasks:
            assert replica not in spec["tfReplicaSpecs"]
            continue
        rs = spec["tfReplicaSpecs"][replica]
        assert rs["replicas"] == len(tasks)
        assert rs["restartPolicy"] in RESTART_POLICIES
        assert rs["restartPolicy"] == {"never": "Never", "on-failure": "OnFailure",
                                       "always": "Always"}[restart.for_type(task_type)]
        (container,) = rs["template"]["spec"]["containers"]
        assert container["name"] == "tensorflow"  # the only container the operator configures
        limits = container.get("resources", {}).get("limits", {})
        assert limits.get("nvidia.com/gpu", 0) == gpu_count(tasks[0])
        names = {e["name"] for e in container.get("env", [])}
        assert "CUDA_VISIBLE_DEVICES" not in names and "TF_CONFIG" not in names
        for task in tasks:
            check_replica(plan, manifest, task, tasks[0], tmp_path / task.name.replace(":", "-"))
            if script_argv(plan.inventory, task) != script_argv(plan.inventory, tasks[0]) or \
                    pod_env(task) != pod_env(tasks[0]):
                assert any(f"the {task_type} tasks differ" in n for n in notes(plan))
    assert "tensorboard" not in json.dumps(spec["tfReplicaSpecs"]).lower() or not any(
        t.type == "tensorboard" for t in plan.tasks)


def test_the_job_ends_as_on_the_lab(tmp_path: Path) -> None:
    def spec(case: str) -> dict[str, Any]:
        return tfjob_manifest(make_plan(with_image(inventory(case, tmp_path))))["spec"]

    assert "successPolicy" not in spec("examples/two-hosts.yaml")  # the chief's end
    assert "successPolicy" not in spec("flags")                   # worker 0's
    assert spec("mirrored")["successPolicy"] == "AllWorkers"       # every worker's
    assert spec("mwms-restart")["runPolicy"] == {"cleanPodPolicy": "Running", "backoffLimit": 2}
    assert spec("mwms-restart")["tfReplicaSpecs"]["Worker"]["restartPolicy"] == "OnFailure"


def test_the_kubernetes_block_and_its_mistakes(tmp_path: Path) -> None:
    base = (ROOT / "examples" / "two-hosts.yaml").read_text()
    with pytest.raises(InventoryError) as err:
        tfjob_manifest(make_plan(parse_inventory(base, "lab.yaml")))
    assert err.value.key_path == "kubernetes.image" and "needs the container image" in str(
        err.value)
    text = base.replace("name: lab ", "name: Lab_2 ") + (
        "kubernetes: {image: 'r.example.org/x:1', on_failure: ExitCode}\n")
    inv = parse_inventory(text, "lab.yaml")
    with pytest.raises(InventoryError) as err:
        tfjob_manifest(make_plan(inv))
    assert err.value.key_path == "kubernetes.name" and "add `name: lab-2`" in str(err.value)
    assert inv.kubernetes is not None
    inv = dataclasses.replace(
        inv, kubernetes=dataclasses.replace(inv.kubernetes, name="lab2"),
        job=dataclasses.replace(inv.job, restart=RestartPolicy({"ps": "on-failure"}, max=5)))
    manifest = tfjob_manifest(make_plan(inv))
    assert manifest["spec"]["tfReplicaSpecs"]["PS"]["restartPolicy"] == "ExitCode"
    assert manifest["metadata"] == {"name": "lab2", "namespace": "default"}
    assert manifest["spec"]["runPolicy"]["backoffLimit"] == 5


@pytest.mark.parametrize("case", GROUP_CASES)
def test_a_torch_or_jax_job_is_refused_in_one_sentence(case: str, tmp_path: Path) -> None:
    inv = with_image(inventory(case, tmp_path))
    with pytest.raises(InventoryError) as err:
        tfjob_manifest(make_plan(inv))
    framework = inv.job.framework
    assert err.value.key_path == "job.framework"
    assert str(err.value).endswith(f"a TFJob runs TensorFlow's cluster, not a {framework} job "
                                   "— Kubeflow's training operator runs it as a "
                                   f"{'PyTorchJob' if framework == 'torch' else 'JAXJob'}; "
                                   "`tfctl export slurm` writes this job for Slurm")


def test_export_tfjob_says_what_does_not_carry_over(tmp_path: Path) -> None:
    text = (ROOT / "examples" / "two-hosts.yaml").read_text() + \
        "kubernetes: {image: 'r.example.org/x:1'}\n"
    (tmp_path / "cluster.yaml").write_text(text)
    run = subprocess.run([sys.executable, "-m", "tfctl.tui", "-i", str(tmp_path / "cluster.yaml"),
                          "export", "tfjob"], capture_output=True, text=True, check=True)
    assert yaml.safe_load(run.stdout)["kind"] == "TFJob"
    assert "note: TensorBoard is no TFJob replica" in run.stderr
    assert "no `kubernetes.claim`" in run.stderr


@pytest.mark.parametrize("command", [["export", "slurm"], ["export", "tfjob"]])
def test_export_imports_nothing_heavy(command: list[str]) -> None:
    example = ROOT / "examples" / "beyond-the-lab.yaml"
    probe = ("import json, sys\nfrom tfctl.tui.cli.main import main\n"
             f"try:\n    main(['-i', {str(example)!r}, *{command!r}], prog_name='tfctl')\n"
             "except SystemExit as exc:\n    assert not exc.code, exc.code\n"
             "heavy = {m.split('.')[0] for m in sys.modules} & {'textual', 'tensorflow', "
             "'paramiko', 'matplotlib'}\nprint(json.dumps(sorted(heavy)), file=sys.stderr)\n")
    run = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         check=True)
    assert json.loads(run.stderr.strip().splitlines()[-1]) == []
