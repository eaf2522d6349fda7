"""Inventory → Plan: every task of the job with its host, port, device mask, env and argv.

Pure and deterministic. What `tfctl plan --json` prints is exactly what `launch` executes, so the
dashboard and the remote layer never build a command line themselves.

Ordering follows the classic machinefile convention: hosts in file order; on each host its
parameter servers (ports `ports.ps` + local index) and its workers (one per selected GPU, or one
per host; ports `ports.worker` + local index). So with hosts titan (4 GPUs) and gtx970 ([0]),
ps_hosts is `titan:2222,gtx970:2222` and worker_hosts `titan:2223..2226,gtx970:2223`.
Those are the ports of a host nobody else runs a job on: for a type whose port the file does
not write, `up` asks each host which of them are free and takes a free port of `job.port_range`
in place of a taken one (two runs share a host), then plans again with `chosen` (`with_ports`),
so the cluster spec, TF_CONFIG and flags name the ports the tasks will really listen on.

`job.strategy` changes three things here: under multi_worker_mirrored the chief is a training
worker, so it takes its host's first worker slot (mask and all) instead of an empty mask; under
mirrored each host runs one worker on all its GPUs with no port and no cluster; a task type whose
port is None (`custom` with `ports.<type>: none`) opens no port and is left out of the cluster
spec, as the evaluator always is. TensorFlow's rules are checked on the finished plan
(`rules.py`): the loader refuses what they forbid, and their warnings ride on `Plan.warnings`.

The cluster spec names each host as the other hosts reach it, which is not always how this
client's ssh does: an `address` that is an ~/.ssh/config alias means nothing on the hosts. So a
host's `cluster_address` wins; else `reach`, when the caller gives one, turns the host into the
name its ssh config resolves (the CLI and RunController pass `remote/connect/clusteraddr.py`,
OpenSSH's HostName; this module reads no ssh config itself); else the address as written.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from tfctl.inventory import rules
from tfctl.inventory.model import Host, Inventory
from tfctl.inventory.tasks import (  # re-exported: callers import them from here
    BASE_ENV,
    CLUSTER_TYPES,
    LAUNCH_ORDER,
    Plan,
    Task,
    TaskType,
)

__all__ = ["BASE_ENV", "CLUSTER_TYPES", "LAUNCH_ORDER", "Plan", "Reach", "Task", "TaskType",
           "make_plan", "with_ports"]

Reach = Callable[[Host], str]
"""A host → the name the other hosts reach it by (its ssh config's HostName, say)."""

@dataclass(frozen=True)
class _Slot:
    """A cluster task before its command line is known (that needs the whole cluster)."""

    type: TaskType
    index: int
    host: Host
    port: int | None
    mask: str
    auto: bool = False
    """Its port is chosen at up (its type's port is not written in the file)."""


def make_plan(inv: Inventory, reach: Reach | None = None,
              chosen: Mapping[str, int] | None = None) -> Plan:
    """The plan of `inv`; `reach` names the hosts in the cluster spec (module docstring);
    `chosen`: task name → the port `up` took for it, for tasks whose port is chosen at up."""
    addresses = cluster_addresses(inv, reach)
    slots = [_Slot(s.type, s.index, s.host, chosen[f"{s.type}:{s.index}"], s.mask, s.auto)
             if s.auto and chosen and f"{s.type}:{s.index}" in chosen else s
             for s in _cluster_slots(inv)]
    cluster = {
        t: [host_port(addresses[s.host.name], s.port)
            for s in slots if s.type == t and s.port is not None]
        for t in CLUSTER_TYPES
        if any(s.type == t and s.port is not None for s in slots)
    }
    tasks = [_cluster_task(inv, s, cluster, addresses) for s in slots]
    tasks += _side_tasks(inv, cluster, addresses)
    tasks.sort(key=lambda t: LAUNCH_ORDER.index(t.type))
    plan = Plan(inventory=inv, tasks=tuple(tasks), cluster=cluster, addresses=addresses)
    return dataclasses.replace(plan, warnings=rules.warnings(plan))


def with_ports(plan: Plan, chosen: Mapping[str, int]) -> Plan:
    """`plan` with the ports `up` took (task name → port) for tasks whose port is chosen at up:
    their cluster spec, TF_CONFIG and flags name those ports."""
    if not chosen:
        return plan
    return make_plan(plan.inventory, lambda h: plan.address_of(h.name), chosen)


def cluster_addresses(inv: Inventory, reach: Reach | None = None) -> dict[str, str]:
    """Host name → the name the cluster spec gives it: `cluster_address`, else `reach`'s
    answer, else `address`."""
    return {h.name: h.cluster_address or (reach(h) if reach is not None else h.address)
            for h in inv.hosts}


def host_port(address: str, port: int) -> str:
    """`address:port`, an IPv6 address in brackets (`[fd00::2]:2222`), as gRPC reads it."""
    return f"[{address}]:{port}" if ":" in address else f"{address}:{port}"


def _cluster_slots(inv: Inventory) -> list[_Slot]:
    job = inv.job
    base = _first_ports(inv)
    slots: list[_Slot] = []
    auto = set(job.ports.chosen_at_up)
    for host in inv.hosts:
        for i in range(host.ps):
            slots.append(_Slot("ps", 0, host, _port(base["ps"], i), ""))
    for host in inv.hosts:
        for i, mask in enumerate(worker_masks(host, job.workers)):
            slots.append(_Slot("worker", 0, host, _port(base["worker"], i), mask))
    if job.chief is not None:
        chief_host = inv.host(job.chief)
        mask = _chief_mask(chief_host)
        if job.strategy == "multi_worker_mirrored":
            mask = _take_first_worker_slot(slots, chief_host, base["worker"])
        slots.append(_Slot("chief", 0, chief_host, base["chief"], mask))
    counters: dict[str, int] = {}
    numbered = []
    for s in slots:
        n = counters.get(s.type, 0)
        counters[s.type] = n + 1
        numbered.append(_Slot(s.type, n, s.host, s.port, s.mask,
                              s.type in auto and s.port is not None))
    return numbered


def _first_ports(inv: Inventory) -> dict[str, int | None]:
    """Each cluster type's first port; all None under mirrored, whose processes never meet."""
    ports = inv.job.ports
    if inv.job.style == "none":
        return {"ps": None, "worker": None, "chief": None}
    return {"ps": ports.ps, "worker": ports.worker, "chief": ports.chief}


def _port(base: int | None, offset: int) -> int | None:
    return None if base is None else base + offset


def _take_first_worker_slot(slots: list[_Slot], host: Host, worker_port: int | None) -> str:
    """Under MultiWorkerMirroredStrategy the chief is a worker that also saves checkpoints: it
    takes over its host's first worker slot (GPU mask included), so every device still trains
    exactly once and every training task keeps the same devices. The host's other workers keep
    their order and ports, renumbered from `ports.worker`."""
    mine = [i for i, s in enumerate(slots) if s.type == "worker" and s.host.name == host.name]
    taken = slots.pop(mine[0])
    for local, i in enumerate(mine[1:]):
        s = slots[i - 1]
        slots[i - 1] = _Slot("worker", 0, s.host, _port(worker_port, local), s.mask)
    return taken.mask


def worker_masks(host: Host, layout: str) -> list[str]:
    """The CUDA_VISIBLE_DEVICES of each worker on `host`: one per GPU, one for all, or CPU."""
    if not host.gpus:
        return [""] * host.cpu_workers
    if layout == "per_host":
        return [",".join(str(g) for g in host.gpus)]
    return [str(g) for g in host.gpus]


def _chief_mask(host: Host) -> str:
    # The ParameterServerStrategy coordinator only dispatches work: keep it off the GPUs.
    # (multi_worker_mirrored gives its chief a worker's mask instead: `_take_first_worker_slot`.)
    return ""


def _cluster_task(inv: Inventory, s: _Slot, cluster: Mapping[str, list[str]],
                  addresses: Mapping[str, str]) -> Task:
    job = inv.job
    env = _task_env(inv, s.host, s.type, s.mask)
    argv = [s.host.python, job.script, *script_args(inv, s.host, s.type)]
    if job.style == "tf_config":
        env["TF_CONFIG"] = tf_config(cluster, s.type, s.index)
        if "ps" in cluster:
            env.setdefault("GRPC_FAIL_FAST", "use_caller")
    elif job.style == "flags":
        argv += classic_flags(cluster, s.type, s.index)
    return Task(s.type, s.index, s.host.name, addresses[s.host.name], s.port, s.mask, env,
                s.host.workdir, tuple(argv), port_chosen_at_up=s.auto)


def _side_tasks(inv: Inventory, cluster: Mapping[str, list[str]],
                addresses: Mapping[str, str]) -> list[Task]:
    job = inv.job
    tasks: list[Task] = []
    if job.evaluator is not None:
        ev = job.evaluator
        host = inv.host(ev.host)
        env = _task_env(inv, host, "evaluator", "")
        argv = [host.python, ev.script, *ev.args]
        if job.style == "tf_config":
            env["TF_CONFIG"] = tf_config(cluster, "evaluator", 0)
        tasks.append(Task("evaluator", 0, host.name, addresses[host.name], None, "", env,
                          host.workdir, tuple(argv)))
    if job.tensorboard is not None:
        tb = job.tensorboard
        host = inv.host(tb.host)
        env = _task_env(inv, host, "tensorboard", "")
        argv = [host.python, "-m", "tensorboard.main", f"--logdir={tb.logdir}",
                "--host=127.0.0.1", f"--port={tb.port}"]
        tasks.append(Task("tensorboard", 0, host.name, addresses[host.name], tb.port, "", env,
                          host.workdir, tuple(argv)))
    return tasks


def script_args(inv: Inventory, host: Host, task_type: str) -> list[str]:
    """What follows `job.script`: `job.args`, then the host's `args`, then `job.task_args` of
    the task's type (later wins with argparse, so the most specific value comes last)."""
    return [*inv.job.args, *host.args, *inv.job.task_args.get(task_type, ())]


def _task_env(inv: Inventory, host: Host, task_type: str, mask: str) -> dict[str, str]:
    """tfctl's base env, then `defaults.env` and the host's `env`, then `job.task_env` of the
    task's type; the mask (and TF_CONFIG, set by the caller) are tfctl's and always win."""
    env = dict(BASE_ENV)
    if inv.job.keras == "legacy":  # Keras 2 (tf_keras) behind tf.keras: see docs/field-notes.md
        env["TF_USE_LEGACY_KERAS"] = "1"
    env.update(host.env)
    env.update(inv.job.task_env.get(task_type, {}))
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
