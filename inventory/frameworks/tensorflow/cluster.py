"""How TensorFlow's tasks are placed, and how each learns its place: TF_CONFIG or the flags.

Ordering follows the classic machinefile convention: hosts in file order; on each host its
parameter servers (ports `ports.ps` + local index) and its workers (one per selected GPU, or one
per host; ports `ports.worker` + local index). So with hosts titan (4 GPUs) and gtx970 ([0]),
ps_hosts is `titan:2222,gtx970:2222` and worker_hosts `titan:2223..2226,gtx970:2223`.

`job.strategy` changes three things here: under multi_worker_mirrored the chief is a training
worker, so it takes its host's first worker slot (mask and all) instead of an empty mask; under
mirrored each host runs one worker on all its GPUs with no port and no cluster; a task type whose
port is None (`custom` with `ports.<type>: none`) opens no port and is left out of the cluster
spec, as the evaluator always is.

The style says how a task is handed the cluster: `tf_config` sets TF_CONFIG (the cluster spec
and the task's own type and index; with parameter servers also GRPC_FAIL_FAST=use_caller unless
the inventory sets it), `flags` appends the classic `--ps_hosts/--worker_hosts/--job_name/
--task_index`, `none` hands nothing (mirrored: the processes never meet).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence

from tfctl.inventory.frameworks.interface import Cluster, Handed, host_port, numbered, worker_masks
from tfctl.inventory.model import Inventory, Job
from tfctl.inventory.tasks import COMMON_ENV, Place

CLUSTER_TYPES = ("chief", "worker", "ps")
"""The types of TensorFlow's cluster spec, in its order (the evaluator is never a member)."""
ROLES = ("ps", "worker", "chief", "evaluator")
"""Every type TensorFlow runs, in launch order: servers first, then those that connect to them."""


def base_env(job: Job) -> dict[str, str]:
    """Every task's env before the inventory's: GPU memory grown as needed, and Keras 2 behind
    tf.keras where `job.keras: legacy` asks for it (docs/field-notes.md)."""
    env = {"TF_FORCE_GPU_ALLOW_GROWTH": "true", **COMMON_ENV}
    if job.keras == "legacy":
        env["TF_USE_LEGACY_KERAS"] = "1"
    return env


def place(inv: Inventory, addresses: Mapping[str, str]) -> list[Place]:
    """The parameter servers, workers and chief of `inv`, numbered, with ports and masks."""
    job = inv.job
    base = _first_ports(inv)
    places: list[Place] = []
    for host in inv.hosts:
        for i in range(host.ps):
            places.append(Place("ps", 0, host.name, addresses[host.name],
                                _port(base["ps"], i), ""))
    for host in inv.hosts:
        for i, mask in enumerate(worker_masks(host, job.workers)):
            places.append(Place("worker", 0, host.name, addresses[host.name],
                                _port(base["worker"], i), mask))
    if job.chief is not None:
        # The ParameterServerStrategy coordinator only dispatches work: it stays off the GPUs.
        mask = ""
        if job.strategy == "multi_worker_mirrored":
            mask = _take_first_worker_slot(places, job.chief, base["worker"])
        places.append(Place("chief", 0, job.chief, addresses[job.chief], base["chief"], mask))
    return numbered(places, job.ports.chosen_at_up)


def spec(places: Sequence[Place]) -> dict[str, list[str]]:
    """The cluster spec: `host:port` of every task of a cluster type that opens a port."""
    return {t: [host_port(p.address, p.port) for p in places
                if p.type == t and p.port is not None]
            for t in CLUSTER_TYPES
            if any(p.type == t and p.port is not None for p in places)}


def hand(job: Job, place: Place, cluster: Cluster) -> Handed:
    """TF_CONFIG (or the classic flags) for `place`; the evaluator gets TF_CONFIG only."""
    member = place.type in CLUSTER_TYPES
    if job.style == "tf_config":
        defaults = {"GRPC_FAIL_FAST": "use_caller"} if member and "ps" in cluster.spec else {}
        return Handed(env={"TF_CONFIG": tf_config(cluster.spec, place.type, place.index)},
                      env_defaults=defaults)
    if job.style == "flags" and member:
        return Handed(args=tuple(classic_flags(cluster.spec, place.type, place.index)))
    return Handed()


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


def _first_ports(inv: Inventory) -> dict[str, int | None]:
    """Each cluster type's first port; all None under mirrored, whose processes never meet."""
    ports = inv.job.ports
    if inv.job.style == "none":
        return {"ps": None, "worker": None, "chief": None}
    return {"ps": ports.ps, "worker": ports.worker, "chief": ports.chief}


def _port(base: int | None, offset: int) -> int | None:
    return None if base is None else base + offset


def _take_first_worker_slot(places: list[Place], host: str, worker_port: int | None) -> str:
    """Under MultiWorkerMirroredStrategy the chief is a worker that also saves checkpoints: it
    takes over its host's first worker slot (GPU mask included), so every device still trains
    exactly once and every training task keeps the same devices. The host's other workers keep
    their order and ports, renumbered from `ports.worker`."""
    mine = [i for i, p in enumerate(places) if p.type == "worker" and p.host == host]
    taken = places.pop(mine[0])
    for local, i in enumerate(mine[1:]):
        p = places[i - 1]
        places[i - 1] = Place("worker", 0, p.host, p.address, _port(worker_port, local), p.mask)
    return taken.mask
