"""Inventory → Plan: every task of the job with its host, port, device mask, env and argv.

Pure and deterministic. What `tfctl plan --json` prints is exactly what `launch` executes, so the
dashboard and the remote layer never build a command line themselves.

Ordering follows the classic machinefile convention: hosts in file order; on each host its
parameter servers (ports `ports.ps` + local index) and its workers (one per selected GPU, or one
per host; ports `ports.worker` + local index). So with hosts titan (4 GPUs) and gtx970 ([0]),
ps_hosts is `titan:2222,gtx970:2222` and worker_hosts `titan:2223..2226,gtx970:2223`.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tfctl.inventory.model import Host, Inventory

TaskType = str  # "ps" | "worker" | "chief" | "evaluator" | "tensorboard"

# Types that belong to the TensorFlow cluster spec (the evaluator and TensorBoard never do).
CLUSTER_TYPES = ("chief", "worker", "ps")
# Launch order: servers first, then those that connect to them.
LAUNCH_ORDER = ("ps", "worker", "chief", "evaluator", "tensorboard")

# PCI_BUS_ID: masks are nvidia-smi indices (PCI order); CUDA's default is fastest-first, which on
# a mixed box (TITAN X + GTX 970) would put a task on another GPU than its mask names.
BASE_ENV = {"TF_FORCE_GPU_ALLOW_GROWTH": "true", "PYTHONUNBUFFERED": "1",
            "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}


@dataclass(frozen=True)
class Task:
    """One process of the job, exactly as it will be started on its host."""

    type: TaskType
    index: int
    host: str
    address: str
    port: int | None
    """The port it serves on (TF gRPC or TensorBoard HTTP); None for the evaluator."""
    cuda_visible_devices: str
    """The device mask: "" for CPU-only tasks (ps, evaluator, TensorBoard, CPU hosts)."""
    env: Mapping[str, str]
    """The full environment tfctl sets (mask and TF_CONFIG included), on top of the login env."""
    cwd: str
    argv: tuple[str, ...]

    @property
    def name(self) -> str:
        return f"{self.type}:{self.index}"

    @property
    def command(self) -> str:
        """argv as one shell-quoted line, for display and copy-paste."""
        return shlex.join(self.argv)

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "type": self.type,
            "index": self.index,
            "host": self.host,
            "address": self.address,
            "port": self.port,
            "cuda_visible_devices": self.cuda_visible_devices,
            "env": dict(self.env),
            "cwd": self.cwd,
            "argv": list(self.argv),
            "command": self.command,
        }


@dataclass(frozen=True)
class Plan:
    inventory: Inventory
    tasks: tuple[Task, ...]
    cluster: Mapping[str, list[str]] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()

    def task(self, name: str) -> Task:
        for task in self.tasks:
            if task.name == name:
                return task
        raise KeyError(name)

    def on_host(self, host: str) -> tuple[Task, ...]:
        return tuple(t for t in self.tasks if t.host == host)

    @property
    def hosts_used(self) -> tuple[str, ...]:
        seen = {t.host for t in self.tasks}
        return tuple(h.name for h in self.inventory.hosts if h.name in seen)

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.inventory.name,
            "style": self.inventory.job.style,
            "cluster": {k: list(v) for k, v in self.cluster.items()},
            "tasks": [t.to_json() for t in self.tasks],
            "warnings": list(self.warnings),
        }


@dataclass(frozen=True)
class _Slot:
    """A cluster task before its command line is known (that needs the whole cluster)."""

    type: TaskType
    index: int
    host: Host
    port: int | None
    mask: str


def make_plan(inv: Inventory) -> Plan:
    slots = _cluster_slots(inv)
    cluster = {
        t: [f"{s.host.address}:{s.port}" for s in slots if s.type == t]
        for t in CLUSTER_TYPES
        if any(s.type == t for s in slots)
    }
    tasks = [_cluster_task(inv, s, cluster) for s in slots]
    tasks += _side_tasks(inv, cluster)
    tasks.sort(key=lambda t: LAUNCH_ORDER.index(t.type))
    return Plan(inventory=inv, tasks=tuple(tasks), cluster=cluster, warnings=_warnings(inv))


def _cluster_slots(inv: Inventory) -> list[_Slot]:
    job = inv.job
    slots: list[_Slot] = []
    for host in inv.hosts:
        for i in range(host.ps):
            slots.append(_Slot("ps", 0, host, job.ports.ps + i, ""))
    for host in inv.hosts:
        for i, mask in enumerate(worker_masks(host, job.workers)):
            slots.append(_Slot("worker", 0, host, job.ports.worker + i, mask))
    if job.chief is not None:
        chief_host = inv.host(job.chief)
        slots.append(_Slot("chief", 0, chief_host, job.ports.chief, _chief_mask(chief_host)))
    counters: dict[str, int] = {}
    numbered = []
    for s in slots:
        n = counters.get(s.type, 0)
        counters[s.type] = n + 1
        numbered.append(_Slot(s.type, n, s.host, s.port, s.mask))
    return numbered


def worker_masks(host: Host, layout: str) -> list[str]:
    """The CUDA_VISIBLE_DEVICES of each worker on `host`: one per GPU, one for all, or CPU."""
    if not host.gpus:
        return [""] * host.cpu_workers
    if layout == "per_host":
        return [",".join(str(g) for g in host.gpus)]
    return [str(g) for g in host.gpus]


def _chief_mask(host: Host) -> str:
    # The ParameterServerStrategy coordinator only dispatches work: keep it off the GPUs.
    return ""


def _cluster_task(inv: Inventory, s: _Slot, cluster: Mapping[str, list[str]]) -> Task:
    job = inv.job
    env = _task_env(s.host, s.mask)
    argv = [s.host.python, job.script, *job.args]
    if job.style == "tf_config":
        env["TF_CONFIG"] = tf_config(cluster, s.type, s.index)
        if "ps" in cluster:
            env.setdefault("GRPC_FAIL_FAST", "use_caller")
    else:
        argv += classic_flags(cluster, s.type, s.index)
    return Task(s.type, s.index, s.host.name, s.host.address, s.port, s.mask, env,
                s.host.workdir, tuple(argv))


def _side_tasks(inv: Inventory, cluster: Mapping[str, list[str]]) -> list[Task]:
    job = inv.job
    tasks: list[Task] = []
    if job.evaluator is not None:
        ev = job.evaluator
        host = inv.host(ev.host)
        env = _task_env(host, "")
        argv = [host.python, ev.script, *ev.args]
        if job.style == "tf_config":
            env["TF_CONFIG"] = tf_config(cluster, "evaluator", 0)
        tasks.append(Task("evaluator", 0, host.name, host.address, None, "", env, host.workdir,
                          tuple(argv)))
    if job.tensorboard is not None:
        tb = job.tensorboard
        host = inv.host(tb.host)
        env = _task_env(host, "")
        argv = [host.python, "-m", "tensorboard.main", f"--logdir={tb.logdir}",
                "--host=127.0.0.1", f"--port={tb.port}"]
        tasks.append(Task("tensorboard", 0, host.name, host.address, tb.port, "", env,
                          host.workdir, tuple(argv)))
    return tasks


def _task_env(host: Host, mask: str) -> dict[str, str]:
    env = dict(BASE_ENV)
    env.update(host.env)
    env["CUDA_VISIBLE_DEVICES"] = mask
    return env


def tf_config(cluster: Mapping[str, list[str]], task_type: str, index: int) -> str:
    """The TF_CONFIG JSON for one task (the evaluator is not part of the cluster spec)."""
    spec = {"cluster": {k: list(v) for k, v in cluster.items()},
            "task": {"type": task_type, "index": index}}
    return json.dumps(spec, separators=(",", ":"))


def classic_flags(cluster: Mapping[str, list[str]], task_type: str, index: int) -> list[str]:
    """The between-graph flags the classic tutorials pass to every process."""
    return [
        f"--ps_hosts={','.join(cluster.get('ps', []))}",
        f"--worker_hosts={','.join(cluster.get('worker', []))}",
        f"--job_name={task_type}",
        f"--task_index={index}",
    ]


def _warnings(inv: Inventory) -> tuple[str, ...]:
    out = []
    job = inv.job
    if job.style == "tf_config" and not job.chief and any(h.ps for h in inv.hosts):
        out.append(
            "style tf_config with parameter servers but no chief: ParameterServerStrategy "
            "needs `chief: true`; for MultiWorkerMirroredStrategy set `ps: 0` on every host."
        )
    if job.style == "tf_config" and job.chief and any(h.ps for h in inv.hosts):
        hosts = {h.name for h in inv.hosts if h.ps} | {job.chief}
        if len(hosts) > 1:
            out.append(
                "ParameterServerStrategy writes checkpoints from every ps host: the checkpoint "
                "dir must be one absolute path on a filesystem shared by "
                + ", ".join(sorted(hosts)) + " (NFS); a host-local dir makes the save fail."
            )
    return tuple(out)
