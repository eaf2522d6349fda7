"""The plan as a Kubeflow TFJob (`kubeflow.org/v1`), for the training operator to run.

One replica spec per task type of the plan (Chief, PS, Worker, Evaluator; TensorBoard is no
TFJob replica), with the plan's counts, the task's script and arguments, its environment (less
CUDA_VISIBLE_DEVICES, which the NVIDIA device plugin decides from `nvidia.com/gpu`, and
TF_CONFIG, which the operator writes), the GPU count of its mask as `nvidia.com/gpu`, and
`restartPolicy` from `job.restart` (never → Never, on-failure → OnFailure, or ExitCode with
`kubernetes.on_failure: ExitCode`: restart on a kill, 128-255, not on a crash, 1-127;
always → Always), `runPolicy.backoffLimit` from `restart.max`.

The operator gives every pod TF_CONFIG (kubeflow/training-operator v1.9.0,
pkg/controller.v1/tensorflow/tensorflow.go, genTFConfigJSONStr/genClusterSpec): the cluster is
every replica type, lower-cased, each replica `<job>-<type>-<i>.<namespace>.svc:<port>`, where
the port is the `tfjob-port` of the container named `tensorflow` (default 2222), plus the pod's
own task; only when the job has more than one pod (isDistributed). `operator_tf_config` says the
same in Python. Two differences from `tfctl plan`: the operator lists the Evaluator in the
cluster (TensorFlow accepts that: multi_worker_util allows an `evaluator` job), and one port per
type (the plan's first). The flags style gets an entrypoint that turns the operator's TF_CONFIG
into `--ps_hosts/--worker_hosts/--job_name/--task_index`; mirrored (no cluster) and a flags
evaluator get one that drops it, so every task sees what the plan gives it.

The job's end follows tfctl's (remote/runs/endrule.py): with a Chief the operator ends the job
with it; without one, worker 0's (flags) or every worker's (`successPolicy: AllWorkers`);
`cleanPodPolicy: Running` then stops what only serves (parameter servers).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

import yaml

from tfctl.inventory.errors import InventoryError
from tfctl.inventory.frameworks import framework_of
from tfctl.inventory.frameworks.tensorflow import TENSORFLOW
from tfctl.inventory.model import Inventory, Kubernetes
from tfctl.inventory.plan import Plan, Task
from tfctl.remote.runs.endrule import deciders

API_VERSION = "kubeflow.org/v1"
CONTAINER = "tensorflow"  # the operator puts TF_CONFIG only into the container of this name
PORT_NAME = "tfjob-port"
DEFAULT_PORT = 2222
REPLICA_TYPES = {"chief": "Chief", "ps": "PS", "worker": "Worker", "evaluator": "Evaluator"}
RESTART_POLICY = {"never": "Never", "on-failure": "OnFailure", "always": "Always"}
GPU = "nvidia.com/gpu"

# `python -c FLAGS_ENTRYPOINT script args...`: the operator's TF_CONFIG as the classic flags.
FLAGS_ENTRYPOINT = (
    "import json,os,sys;c=json.loads(os.environ.pop('TF_CONFIG'));k=c['cluster'];"
    "t=c['task'];a=[sys.executable,*sys.argv[1:],'--ps_hosts='+','.join(k.get('ps',[])),"
    "'--worker_hosts='+','.join(k.get('worker',[])),'--job_name='+t['type'],"
    "'--task_index=%d'%t['index']];os.execv(a[0],a)")
# `python -c NO_CLUSTER_ENTRYPOINT script args...`: the script without the operator's TF_CONFIG.
NO_CLUSTER_ENTRYPOINT = (
    "import os,sys;os.environ.pop('TF_CONFIG',None);"
    "os.execv(sys.executable,[sys.executable,*sys.argv[1:]])")


def tfjob_manifest(plan: Plan) -> dict[str, Any]:
    """The TFJob for `plan`. Raises InventoryError without `kubernetes.image`."""
    inv = plan.inventory
    k8s = inv.kubernetes or Kubernetes()
    _require_tensorflow(inv)
    _require_image(inv, k8s)
    specs: dict[str, Any] = {}
    for task_type, replica in REPLICA_TYPES.items():
        tasks = [t for t in plan.tasks if t.type == task_type]
        if tasks:
            specs[replica] = _replica(inv, k8s, tasks)
    run_policy: dict[str, Any] = {"cleanPodPolicy": "Running"}
    restart = inv.job.restart
    if any(restart.for_type(t) != "never" for t in REPLICA_TYPES):
        run_policy["backoffLimit"] = restart.max
    spec: dict[str, Any] = {"runPolicy": run_policy}
    if deciders(plan)[1] == "all" and "Chief" not in specs:
        spec["successPolicy"] = "AllWorkers"
    spec["tfReplicaSpecs"] = specs
    return {"apiVersion": API_VERSION, "kind": "TFJob",
            "metadata": {"name": job_name(inv), "namespace": k8s.namespace}, "spec": spec}


def tfjob_yaml(plan: Plan, filename: str = "tfjob.yaml") -> str:
    """The manifest as YAML, after a comment that says how to run and watch it."""
    inv = plan.inventory
    manifest = tfjob_manifest(plan)
    name, ns = manifest["metadata"]["name"], manifest["metadata"]["namespace"]
    first = next(iter(manifest["spec"]["tfReplicaSpecs"]))
    header = [
        f"# {inv.name}: the tfctl job as a Kubeflow TFJob, written by `tfctl export tfjob` from",
        f"# {inv.path}. The training operator (kubeflow/training-operator, v1 API) runs it:",
        f"#   kubectl apply -f {filename}",
        f"#   kubectl -n {ns} get tfjob {name}; kubectl -n {ns} logs -f {name}-"
        f"{first.lower()}-0",
        "# Every pod gets TF_CONFIG from the operator: <job>-<type>-<i>.<namespace>.svc:<port>.",
    ]
    body = yaml.safe_dump(manifest, sort_keys=False, default_flow_style=False, width=100)
    return "\n".join(header) + "\n" + body


def job_name(inv: Inventory) -> str:
    """`kubernetes.name`, else the inventory's name where Kubernetes takes it as it is."""
    k8s = inv.kubernetes or Kubernetes()
    if k8s.name is not None:
        return k8s.name
    if re.fullmatch(r"[a-z0-9]([a-z0-9-]{0,46}[a-z0-9])?", inv.name):
        return inv.name
    raise InventoryError(inv.path, k8s.line or None, "kubernetes.name",
                         f"the inventory's name {inv.name!r} is no Kubernetes name (lower-case "
                         "letters, digits and `-`, at most 48)",
                         f"add `name: {_dns_guess(inv.name)}` under `kubernetes:`")


def _dns_guess(name: str) -> str:
    return re.sub(r"[^a-z0-9-]+", "-", name.lower()).strip("-")[:48] or "tfjob"


def _require_tensorflow(inv: Inventory) -> None:
    """A TFJob is TensorFlow's cluster: the operator hands TF_CONFIG, not torch's or JAX's."""
    if framework_of(inv.job) is TENSORFLOW:
        return
    other = {"torch": "a PyTorchJob", "jax": "a JAXJob"}.get(inv.job.framework, "another job")
    raise InventoryError(inv.path, None, "job.framework",
                         f"a TFJob runs TensorFlow's cluster, not a {inv.job.framework} job",
                         f"Kubeflow's training operator runs it as {other}; `tfctl export "
                         "slurm` writes this job for Slurm")


def _require_image(inv: Inventory, k8s: Kubernetes) -> None:
    if k8s.image is None:
        raise InventoryError(inv.path, k8s.line or None, "kubernetes.image",
                             "`tfctl export tfjob` needs the container image the pods run",
                             "add `kubernetes: {image: registry.example.org/you/train:1}`: an "
                             "image with TensorFlow and your code (e.g. built FROM "
                             "tensorflow/tensorflow:latest-gpu)")


def _replica(inv: Inventory, k8s: Kubernetes, tasks: list[Task]) -> dict[str, Any]:
    task = tasks[0]
    container: dict[str, Any] = {"name": CONTAINER, "image": k8s.image,
                                 "command": container_command(inv, k8s, task)}
    if k8s.workdir is not None:
        container["workingDir"] = k8s.workdir
    env = pod_env(task)
    if env:
        container["env"] = [{"name": k, "value": v} for k, v in env.items()]
    if task.port is not None and task.type != "evaluator":
        container["ports"] = [{"name": PORT_NAME, "containerPort": task.port}]
    gpus = gpu_count(task)
    if gpus:
        container["resources"] = {"limits": {GPU: gpus}}
    pod: dict[str, Any] = {"containers": [container]}
    if k8s.claim is not None:
        container["volumeMounts"] = [{"name": "work", "mountPath": k8s.workdir}]
        pod["volumes"] = [{"name": "work", "persistentVolumeClaim": {"claimName": k8s.claim}}]
    mode = inv.job.restart.for_type(task.type)
    policy = k8s.on_failure if mode == "on-failure" else RESTART_POLICY[mode]
    return {"replicas": len(tasks), "restartPolicy": policy, "template": {"spec": pod}}


def script_argv(inv: Inventory, task: Task) -> list[str]:
    """What follows the interpreter in the task's plan argv, less the cluster flags."""
    argv = list(task.argv[1:])
    if inv.job.style == "flags" and task.type in ("ps", "worker", "chief"):
        argv = argv[:-4]
    return argv


def container_command(inv: Inventory, k8s: Kubernetes, task: Task) -> list[str]:
    style = inv.job.style
    if style == "flags" and task.type in ("ps", "worker", "chief"):
        return [k8s.python, "-c", FLAGS_ENTRYPOINT, *script_argv(inv, task)]
    if style != "tf_config":
        return [k8s.python, "-c", NO_CLUSTER_ENTRYPOINT, *script_argv(inv, task)]
    return [k8s.python, *script_argv(inv, task)]


def pod_env(task: Task) -> dict[str, str]:
    return {k: v for k, v in task.env.items() if k not in ("CUDA_VISIBLE_DEVICES", "TF_CONFIG")}


def gpu_count(task: Task) -> int:
    return len(task.cuda_visible_devices.split(",")) if task.cuda_visible_devices else 0


def notes(plan: Plan) -> list[str]:
    """What the TFJob cannot say as the plan does, one sentence each (for stderr)."""
    inv = plan.inventory
    said: list[str] = []
    if any(t.type == "tensorboard" for t in plan.tasks):
        said.append("TensorBoard is no TFJob replica: run it beside the job (e.g. a Deployment "
                    "reading the same volume)")
    for task_type in REPLICA_TYPES:
        tasks = [t for t in plan.tasks if t.type == task_type]
        if len(tasks) < 2:
            continue
        first = tasks[0]
        for other in tasks[1:]:
            if (script_argv(inv, other), pod_env(other), gpu_count(other)) != \
                    (script_argv(inv, first), pod_env(first), gpu_count(first)):
                said.append(f"the {task_type} tasks differ (args, env or GPUs: {other.name} on "
                            f"{other.host}); every {REPLICA_TYPES[task_type]} pod runs as "
                            f"{first.name} on {first.host}")
                break
    if any(t.port is None and t.type in ("ps", "worker", "chief") for t in plan.tasks) and \
            inv.job.style == "tf_config":
        said.append("types without a port (`ports.<type>: none`) are in the operator's "
                    "TF_CONFIG all the same")
    if inv.kubernetes is None or inv.kubernetes.claim is None:
        said.append("no `kubernetes.claim`: what the job writes stays in its pods")
    return said


def operator_tf_config(manifest: Mapping[str, Any], replica: str, index: int,
                       cluster_domain: str = "") -> str | None:
    """The TF_CONFIG the training operator gives pod `index` of `replica` (None: a job of one
    pod, which gets none), as genTFConfigJSONStr marshals it (Go's encoding/json: struct fields
    in order, map keys sorted)."""
    specs = manifest["spec"]["tfReplicaSpecs"]
    if sum(int(s.get("replicas", 1)) for s in specs.values()) == 1:
        return None
    name, ns = manifest["metadata"]["name"], manifest["metadata"].get("namespace", "default")
    cluster: dict[str, list[str]] = {}
    for rtype, spec in specs.items():
        port = _operator_port(spec)
        rt = rtype.lower()
        domain = f".{cluster_domain}" if cluster_domain else ""
        cluster[rt] = [f"{name}-{rt}-{i}.{ns}.svc{domain}:{port}"
                       for i in range(int(spec.get("replicas", 1)))]
    config = {"cluster": dict(sorted(cluster.items())),
              "task": {"type": replica.lower(), "index": index}, "environment": "cloud"}
    return json.dumps(config, separators=(",", ":"))


def _operator_port(spec: Mapping[str, Any]) -> int:
    for container in spec["template"]["spec"]["containers"]:
        if container["name"] == CONTAINER:
            for port in container.get("ports", []):
                if port.get("name") == PORT_NAME:
                    return int(port["containerPort"])
    return DEFAULT_PORT
