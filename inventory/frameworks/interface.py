"""What a framework is to tfctl: the `Framework` Protocol and the records it takes and gives.

A framework (TensorFlow today) decides how the job's processes find each other. tfctl places
them (`Framework.place`: which roles on which host, with which port and device mask), then
hands each one its place in the cluster (`Framework.hand`: the environment and arguments the
framework's own code reads, e.g. TensorFlow's TF_CONFIG). Everything else a task gets (the
inventory's env, the script and its args, the working directory) is the plan builder's
(`inventory/plan.py`), the same whatever the framework.

The records are pure data, so a plan narrowed to a few tasks still knows the whole cluster
(`tasks.Place`, `Plan.places`) and can be handed new ports (`plan.with_ports`) without the
inventory.
"""

# No `from __future__ import annotations` here: a NamedTuple's field written as a string costs
# a `compile` at start-up (typing.ForwardRef), and every `tfctl plan` builds every class here.
import re
from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Literal, NamedTuple, Protocol

from tfctl.inventory.model import Host, Inventory, Job, Ports, Style, WorkerLayout
from tfctl.inventory.tasks import Place, TaskType

if TYPE_CHECKING:  # (yamlmarks would import PyYAML, which a cached inventory's plan never needs)
    from tfctl.inventory.errors import ErrorFactory
    from tfctl.inventory.schema import HostSpec, JobSpec
    from tfctl.inventory.tasks import Plan
    from tfctl.inventory.yamlmarks import PathKey

Level = Literal["ok", "info", "warn", "fail"]
"""How bad a finding of `tfctl check` is."""

# The records here are NamedTuples, not dataclasses: a frozen dataclass costs some six `exec`s
# of generated methods at start-up.
_NOTHING: Mapping[str, str] = MappingProxyType({})


class Cluster(NamedTuple):
    """Every place of the job, and the cluster as the framework writes it (`Plan.cluster`)."""

    places: tuple[Place, ...]
    spec: Mapping[str, list[str]]


class Handed(NamedTuple):
    """What a framework gives one task so that it finds its place in the cluster."""

    env: Mapping[str, str] = _NOTHING
    """Set over everything else the task's env holds (the inventory's env included)."""
    env_defaults: Mapping[str, str] = _NOTHING
    """Set only where neither tfctl nor the inventory set the variable."""
    args: tuple[str, ...] = ()
    """Appended to the task's command line, after every argument the inventory gives."""


class Refusal(NamedTuple):
    """A refused plan: where to point (the first of `keys` written in the file), what, the fix."""

    keys: "tuple[PathKey, ...]"
    message: str
    hint: str


class JobKeys(NamedTuple):
    """What the loader resolves of the job's keys for its framework (`Framework.resolve_job`)."""

    style: Style
    """How a task learns the cluster (`Job.style`)."""
    workers: WorkerLayout
    """The worker layout: the file's `workers:`, else the framework's default."""
    ports: Ports
    together: bool
    """Whether its tasks restart together where `restart.together` is not written."""


class Hint(NamedTuple):
    """A known failure: what in a task's log shows it, and what to do."""

    pattern: re.Pattern[str]
    advice: str


def not_installed_hint(module: str, title: str) -> Hint:
    """The hint for a task whose interpreter lacks the framework (`No module named 'jax'`)."""
    return Hint(re.compile(rf"No module named '?{module}", re.IGNORECASE),
                f"{title} is not installed for the host's `python:` (`tfctl check` shows which)")


class Framework(Protocol):
    """One entry of the registry (`frameworks/__init__.py`)."""

    name: str
    """The name a job gives (`Job.framework`)."""
    title: str
    """The framework in a sentence: `TensorFlow's tasks must reach each other's ports`."""
    roles: tuple[TaskType, ...]
    """The task types it runs, in the order they start (TensorFlow: ps, worker, chief,
    evaluator); TensorBoard is tfctl's own and comes after them whatever the framework."""
    cluster_roles: tuple[TaskType, ...]
    """The roles whose ports the other tasks connect to (what the firewall must let through)."""
    layouts: tuple[WorkerLayout, ...]
    """The worker layouts it runs (`job.workers`): one process per GPU, per host, or both; the
    first is the default where the file writes none."""
    asks_host: tuple[str, ...]
    """What `tfctl check` asks each host about it, by the agent probe's name ("tensorflow":
    remote/agent/tfprobe.py, its version and the GPUs it sees; "torch", "jax":
    remote/agent/fwprobe.py)."""
    shown_env: tuple[str, ...]
    """The variables it hands that `tfctl plan`'s table shows per task (TensorFlow: none, its
    cluster is the `*_hosts` lines above the table)."""
    one_group: bool
    """Its workers are the ranks of one process group that lives and ends whole (torch, jax):
    the job ends at rank 0's end or any rank's failure (remote/runs/endrule.py, mode `group`),
    worker 0 is the acting chief, and only rank 0's port is open to the network."""

    def resolve_job(self, job: "JobSpec", error: "ErrorFactory") -> JobKeys:
        """The job's framework keys resolved in the loader, where a key written in the file is
        still told from one left to its default (its `layouts[0]` is the default layout); what
        the framework cannot honour is refused where it is written (`error`)."""

    def host_ps(self, i: int, host: "HostSpec", job: "JobSpec | None",
                error: "ErrorFactory") -> int:
        """How many parameter servers `hosts[i]` runs; its keys the framework cannot honour
        are refused where they are written. `job` is None in a file without one."""

    def summary(self, job: Job) -> str:
        """The job's shape in a few words, after the inventory's name in `tfctl plan`'s
        header (`style tf_config`, `PyTorch`)."""

    @property
    def hints(self) -> tuple[Hint, ...]:
        """Its known failures in a task's log, the first match wins (remote/runs/failure.py)."""

    def base_env(self, job: Job) -> dict[str, str]:
        """What every task of the job starts from, before the inventory's env; the plan adds
        `tasks.COMMON_ENV` where this leaves it out."""

    def place(self, inv: Inventory, addresses: Mapping[str, str]) -> list[Place]:
        """Every process of the job but TensorBoard, numbered per role, with its port and mask
        (`addresses`: host name → the name the cluster gives it)."""

    def spec(self, places: Sequence[Place]) -> dict[str, list[str]]:
        """The cluster as `tfctl plan` shows it (`Plan.cluster`), from the places."""

    def hand(self, job: Job, place: Place, cluster: Cluster) -> Handed:
        """What `place` is given to find its place in `cluster`; a function of the places'
        types, indices, addresses, ports and masks only, so that new ports hand new values."""

    def refusals(self, plan: "Plan") -> list[Refusal]:
        """What the framework would fail on at run time, in the order a reader fixes them."""

    def warnings(self, plan: "Plan") -> tuple[str, ...]:
        """What runs but fails later or wastes the lab."""

    def judge_install(self, probe: Mapping[str, Any]) -> list[tuple[Level, str]]:
        """What the host's probe answer says of the framework's installation (its version)."""

    def judge_import(self, probe: Mapping[str, Any], wanted: tuple[int, ...],
                     job: Job) -> list[tuple[Level, str]]:
        """What the framework said of itself when the host's probe imported it (`asks_host`),
        against the GPUs the inventory selects there and the job."""


# ---------------------------------------------------------------- what placing uses


def worker_masks(host: Host, layout: WorkerLayout) -> list[str]:
    """The CUDA_VISIBLE_DEVICES of each worker on `host`: one per GPU, one for all, or CPU."""
    if not host.gpus:
        return [""] * host.cpu_workers
    if layout == "per_host":
        return [",".join(str(g) for g in host.gpus)]
    return [str(g) for g in host.gpus]


def host_port(address: str, port: int) -> str:
    """`address:port`, an IPv6 address in brackets (`[fd00::2]:2222`), as gRPC reads it."""
    return f"[{address}]:{port}" if ":" in address else f"{address}:{port}"


def numbered(places: Sequence[Place], chosen_at_up: Sequence[str]) -> list[Place]:
    """`places` numbered from 0 within each role, in their order; a place of a role in
    `chosen_at_up` with a port has that port chosen at up."""
    counters: dict[str, int] = {}
    out = []
    for p in places:
        n = counters.get(p.type, 0)
        counters[p.type] = n + 1
        out.append(Place(p.type, n, p.host, p.address, p.port, p.mask,
                         p.type in chosen_at_up and p.port is not None))
    return out
