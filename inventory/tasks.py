"""The plan as data: each task of the job exactly as it will run, and the plan that holds them.

Pure records (no logic beyond lookups and JSON), apart from `plan.py`, which builds them, so that
the rules (`rules.py`, a framework's) can judge a plan without importing the module that calls it.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tfctl.inventory.model import Inventory

TaskType = str
"""A role of the job's framework (TensorFlow: ps, worker, chief, evaluator), or tensorboard."""

# PCI_BUS_ID: masks are nvidia-smi indices (PCI order); CUDA's default is fastest-first, which on
# a mixed box (TITAN X + GTX 970) would put a task on another GPU than its mask names.
COMMON_ENV = {"PYTHONUNBUFFERED": "1", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
"""What every task's env holds whatever the framework (`Framework.base_env` adds its own)."""


@dataclass(frozen=True)
class Task:
    """One process of the job, exactly as it will be started on its host."""

    type: TaskType
    index: int
    host: str
    address: str
    """Its host as the cluster spec names it (`Plan.addresses`), what the other hosts reach."""
    port: int | None
    """The port it serves on (TF gRPC or TensorBoard HTTP); None when it opens none: the
    evaluator, mirrored workers, and types given `ports.<type>: none` (strategy custom)."""
    cuda_visible_devices: str
    """The device mask: "" for CPU-only tasks (ps, evaluator, TensorBoard, CPU hosts)."""
    env: Mapping[str, str]
    """The full environment tfctl sets (the mask and what the framework hands the task, e.g.
    TF_CONFIG, included), on top of the login env."""
    cwd: str
    argv: tuple[str, ...]
    port_chosen_at_up: bool = False
    """Its port is not written in the file: `up` keeps `port` where that is free on the host,
    else takes a free one of `job.port_range` (the run's manifest records which)."""

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
            "port_chosen_at_up": self.port_chosen_at_up,
            "cuda_visible_devices": self.cuda_visible_devices,
            "env": dict(self.env),
            "cwd": self.cwd,
            "argv": list(self.argv),
            "command": self.command,
        }


@dataclass(frozen=True)
class Place:
    """One process of the framework's cluster as placed: where it runs, what it serves on, which
    devices it sees; what a framework hands a task its place in the cluster from
    (inventory/frameworks/)."""

    type: TaskType
    index: int
    host: str
    address: str
    """Its host as the other hosts reach it (`Plan.addresses`)."""
    port: int | None
    """The port it serves on; None when it opens none (it may still be handed the cluster)."""
    mask: str
    """Its CUDA_VISIBLE_DEVICES: "" for a CPU-only process."""
    port_chosen_at_up: bool = False
    """Its port is not written in the file: `up` may take another (`plan.with_ports`)."""

    @property
    def name(self) -> str:
        return f"{self.type}:{self.index}"


@dataclass(frozen=True)
class Plan:
    """Every task of the job exactly as it will run, and the cluster they form."""

    inventory: Inventory
    tasks: tuple[Task, ...]
    cluster: Mapping[str, list[str]] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()
    addresses: Mapping[str, str] = field(default_factory=dict)
    """Host name → the name the cluster spec gives it (its `cluster_address`, else its ssh
    HostName where the caller resolved it, else its `address`)."""
    places: tuple[Place, ...] = ()
    """Every process of the framework's cluster as placed (port, mask, address), whole even
    where `tasks` was narrowed to a few of them: what `plan.with_ports` hands new ports from.
    Empty for a plan built by hand: its tasks are then the cluster."""
    oneoff: Mapping[str, Any] | None = None
    """A one-off command's run (`tfctl run`, inventory/oneoff.py): its command, name, sweep and
    point, which every host's manifest records; None for the inventory's job."""

    def address_of(self, host: str) -> str:
        """The name the other hosts reach `host` by."""
        return self.addresses.get(host) or self.inventory.host(host).address

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
            "framework": self.inventory.job.framework,
            "strategy": self.inventory.job.strategy,
            "style": self.inventory.job.style,
            "cluster": {k: list(v) for k, v in self.cluster.items()},
            "addresses": dict(self.addresses),
            "tasks": [t.to_json() for t in self.tasks],
            "warnings": list(self.warnings),
            "port_range": list(self.inventory.job.ports.free_range)
            if any(t.port_chosen_at_up for t in self.tasks) else None,
        }
