"""A job of ranks: one process group whose rank 0 is the coordinator (PyTorch, JAX).

What `pytorch.py` and `jaxdist.py` share. Such a job has no parameter servers and no chief:
every process is a `worker`, numbered in host order (its index is its rank), and only rank 0
opens a port the others connect to (torch's TCPStore at MASTER_PORT, JAX's coordinator
service). That port is `job.ports.worker` where the file writes it, else chosen at `up` from
`job.port_range` like every port the file leaves out (remote/runs/up/ports.py), so two runs
share a host. The other ranks open no port tfctl knows of (the collectives' own connections are
the framework's, on ports it picks).

The group lives and dies whole: a collective cannot go on without one of its ranks, and
neither torch's process group nor JAX's runtime takes a lost process back. So the job's end
(remote/runs/endrule.py, mode `group`) is rank 0's end, or the failure of any rank: the host
that sees a rank fail stops every rank of its own at once, the other hosts see the failure as
rank 0's end (rank 0 fails in its next collective, or at the backend's timeout), and a client
that looks (`wait`, `status`, the dashboard) stops every rank that is left. `restart:` restarts
the ranks together (`restart.together` is their default): each waits until rank 0's port has
closed once before it starts again.

What the loader makes of such a job's keys is `rankkeys.py`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from tfctl.inventory.frameworks.interface import (
    JobKeys,
    Level,
    Refusal,
    host_port,
    numbered,
    worker_masks,
)
from tfctl.inventory.model import Inventory, Job, WorkerLayout
from tfctl.inventory.tasks import COMMON_ENV, Place, TaskType

if TYPE_CHECKING:
    from tfctl.inventory.errors import ErrorFactory
    from tfctl.inventory.schema import HostSpec, JobSpec
    from tfctl.inventory.tasks import Plan

ROLES = ("worker", "evaluator")
"""The ranks, then an evaluator beside them (a script that reads the checkpoints, handed
nothing); TensorBoard comes after them, as for every framework."""


def place(inv: Inventory, addresses: Mapping[str, str], shared_mask: bool) -> list[Place]:
    """One rank per GPU (`per_gpu`; `cpu_workers` on a host without GPUs) or per host, in host
    order; rank 0 alone has a port. `shared_mask`: every rank of a host sees all the host's
    GPUs and takes its own by LOCAL_RANK (torchrun's way); else each sees only its own."""
    places: list[Place] = []
    for host in inv.hosts:
        masks = worker_masks(host, inv.job.workers)
        if shared_mask and host.gpus:
            masks = [",".join(str(g) for g in host.gpus)] * len(masks)
        for mask in masks:
            port = inv.job.ports.worker if not places else None
            places.append(Place("worker", 0, host.name, addresses[host.name], port, mask))
    return numbered(places, inv.job.ports.chosen_at_up)


def spec(places: Sequence[Place]) -> dict[str, list[str]]:
    """Rank 0's `address:port`, what every rank connects to (`tfctl plan` shows it)."""
    first = next((p for p in places if p.type == "worker"), None)
    if first is None or first.port is None:
        return {}
    return {"coordinator": [host_port(first.address, first.port)]}


class Rank:
    """Where one place stands in the group: its rank, its host's, and the group's sizes."""

    def __init__(self, place: Place, places: Sequence[Place]) -> None:
        world = [p for p in places if p.type == "worker"]
        hosts = list(dict.fromkeys(p.host for p in world))
        local = [p for p in world if p.host == place.host]
        self.coordinator = world[0]
        self.rank = place.index
        self.world_size = len(world)
        self.local_rank = next(i for i, p in enumerate(local) if p.index == place.index)
        self.local_world_size = len(local)
        self.group_rank = hosts.index(place.host)
        self.group_world_size = len(hosts)
        self.addresses = [p.address for p in world]


class Ranks:
    """What every framework of ranks answers alike (`Framework`'s members): its roles, its
    keys in the loader (`rankkeys.py`), its base env, its cluster as `tfctl plan` shows it, no
    rules of its own on a plan, and what `tfctl check` makes of its probe answer up to what is
    the entry's own. An entry adds its name, what it hands, how it places its ranks' GPUs, how
    it is installed, and what it alone says of an import (`judge_imported`)."""

    title: str
    module: str
    """The Python module the host's probe imports (and names its answer by: `asks_host`)."""
    install: str
    """How to install it, in the fix for a host whose python lacks it (`pip install torch`)."""
    roles: tuple[TaskType, ...] = ROLES
    cluster_roles: tuple[TaskType, ...] = ("worker",)
    layouts: tuple[WorkerLayout, ...] = ("per_gpu", "per_host")
    one_group: bool = True
    shared_mask: bool = False
    """Every rank of a host sees all the host's GPUs and takes its own by LOCAL_RANK (torchrun's
    way), rather than each rank seeing only its own (`place`)."""

    def resolve_job(self, job: JobSpec, error: ErrorFactory) -> JobKeys:
        from tfctl.inventory.frameworks import rankkeys  # (the loader's only)

        rankkeys.check_job(job, self.title, error)
        return JobKeys("env", rankkeys.resolve_workers(job, self.layouts[0]),
                       rankkeys.resolve_ports(job), together=True)

    def host_ps(self, i: int, host: HostSpec, job: JobSpec | None,
                error: ErrorFactory) -> int:
        from tfctl.inventory.frameworks import rankkeys

        return rankkeys.host_ps(i, host, self.title, error)

    def summary(self, job: Job) -> str:
        return self.title

    def place(self, inv: Inventory, addresses: Mapping[str, str]) -> list[Place]:
        return place(inv, addresses, shared_mask=self.shared_mask)

    def base_env(self, job: Job) -> dict[str, str]:
        return dict(COMMON_ENV)

    def spec(self, places: Sequence[Place]) -> dict[str, list[str]]:
        return spec(places)

    def refusals(self, plan: Plan) -> list[Refusal]:
        return []

    def warnings(self, plan: Plan) -> tuple[str, ...]:
        return ()

    def judge_install(self, probe: Mapping[str, Any]) -> list[tuple[Level, str]]:
        versions = probe.get("framework_versions") or {}
        if not versions.get(self.module):
            return [("fail", f"{self.title} is not installed for {probe.get('executable')}: "
                             f"install it there ({self.install}) or point `python:` at an "
                             "interpreter that has it")]
        return self.judge_versions(versions)

    def judge_versions(self, versions: Mapping[str, str]) -> list[tuple[Level, str]]:
        """What the installed versions say, the module's being there (`judge_install`)."""
        return [("ok", f"{self.title} {versions[self.module]}")]

    def judge_import(self, probe: Mapping[str, Any], wanted: tuple[int, ...],
                     job: Job) -> list[tuple[Level, str]]:
        said = (probe.get("frameworks") or {}).get(self.module)
        if said is None:
            return []
        if not said.get("importable"):
            return [("fail", f"`import {self.module}` fails there: {said.get('error')}")]
        return self.judge_imported(said, wanted)

    def judge_imported(self, said: Mapping[str, Any],
                       wanted: tuple[int, ...]) -> list[tuple[Level, str]]:
        """What the module said of itself once imported (its version, the GPUs it sees),
        against the GPUs the inventory selects on the host (`wanted`)."""
        raise NotImplementedError


def too_few_gpus(title: str, said: Mapping[str, Any], wanted: tuple[int, ...],
                 fix: str) -> list[tuple[Level, str]]:
    """A failure where the framework sees fewer GPUs than the inventory selects on the host."""
    seen = len(list(said.get("gpus") or []))
    if not wanted or seen >= len(wanted):
        return []
    return [("fail", f"{title} sees {seen} GPU(s) but the inventory selects {len(wanted)}: "
                     f"{fix}")]
