"""Which task owns which GPU: nvidia-smi's compute processes resolved to the run's tasks.

Why pids from the agent and not from the launch record: TF's process is a child (or grandchild)
of what tfctl launched, and a launcher script may fork several; the agent's `status` lists every
live process of each task (its process group plus everything tagged with the task's
`TFCTL_RUN_ID`/`TFCTL_TASK`), so a GPU process is ours exactly when its pid is in that list.
Anything else on a GPU is foreign (another user's job, or one started by hand) — but only when
that list was read: on a host whose tasks could not be read now (unreachable), a process that is
not among the pids last read is "owner unknown", never foreign (not knowing our tasks is no
evidence that a process is a stranger's: a cut host's own worker would be called foreign).

`map_owners` and `masked_gpus_without_process` are pure; `read_task_processes`, `task_pids` and
`process_users` do one round trip per host (call them from a worker thread).
"""

from __future__ import annotations

import shlex
import threading
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tfctl.remote.agent.vocab import TaskRecord
from tfctl.remote.connect.fleet import Fleet
from tfctl.remote.connect.session import agentops
from tfctl.remote.gpus.lastseen import HostTelemetry
from tfctl.remote.gpus.nvsmi import GpuSample
from tfctl.remote.silence import Silence, silences_from

GpuKey = tuple[str, str]
"""(host name, GPU uuid): UUIDs key GPUs because indices can change at boot."""


@dataclass(frozen=True)
class ForeignProcess:
    """A compute process on one of our GPUs that belongs to none of the run's tasks."""

    pid: int
    user: str | None = None  # None: not looked up, or the process is gone
    process_name: str | None = None
    used_memory_mib: float | None = None

    @property
    def label(self) -> str:
        return f"foreign pid {self.pid}" + (f" user {self.user}" if self.user else "")


@dataclass(frozen=True)
class Owner:
    """Who uses one GPU now: our tasks, foreign processes, both, or nobody."""

    host: str
    gpu_uuid: str
    gpu_index: int | None
    tasks: tuple[str, ...] = ()  # our tasks with a compute process on it
    foreign: tuple[ForeignProcess, ...] = ()
    planned: tuple[str, ...] = ()  # tasks whose CUDA_VISIBLE_DEVICES names it
    unknown: tuple[ForeignProcess, ...] = ()  # on a host whose tasks could not be read now
    stale: bool = False  # `tasks` are from the last read that worked, not from now

    @property
    def kind(self) -> str:
        """"task" | "foreign" | "shared" (ours and foreign) | "unknown" | "idle"."""
        if self.tasks and self.foreign:
            return "shared"
        if self.tasks:
            return "task"
        if self.foreign:
            return "foreign"
        return "unknown" if self.unknown else "idle"

    @property
    def label(self) -> str:
        """"worker:3", "foreign pid 4242 user bob", "worker:0 + foreign pid 7",
        "pid 7 (owner unknown)", or "idle"."""
        parts = [*self.tasks, *(p.label for p in self.foreign),
                 *(f"pid {p.pid} (owner unknown)" for p in self.unknown)]
        return " + ".join(parts) if parts else "idle"


@dataclass(frozen=True)
class MaskMiss:
    """A task whose mask names this GPU, while none of the task's processes is on it."""

    host: str
    task: str
    gpu_uuid: str
    gpu_index: int | None
    mask: str


@dataclass(frozen=True)
class TaskProcesses:
    """One task of a run as the host's agent sees it now: state, live pids, mask, log size."""

    host: str
    name: str
    state: str  # running | starting | exited | killed | stopped | lost | not_started
    pids: tuple[int, ...] = ()
    mask: str | None = None  # CUDA_VISIBLE_DEVICES as launched
    log_size_bytes: int | None = None
    last_line: str = ""
    uptime_s: float | None = None

    @property
    def type(self) -> str:
        return self.name.split(":")[0]


# -- pure ------------------------------------------------------------------------------------


def gpus_in_mask(mask: str | None, gpus: Sequence[GpuSample]) -> tuple[GpuSample, ...]:
    """The GPUs a CUDA_VISIBLE_DEVICES value names, as CUDA reads it: indices or UUIDs (or a
    unique UUID prefix), comma-separated, ending at the first entry that names no GPU; "" none.

    Indices are nvidia-smi's (PCI order): they mean the same GPUs to CUDA only with
    CUDA_DEVICE_ORDER=PCI_BUS_ID.
    """
    chosen: list[GpuSample] = []
    for token in (t.strip() for t in (mask or "").split(",")):
        match = [g for g in gpus if (token.isdigit() and g.index == int(token))
                 or (token.startswith(("GPU-", "MIG-")) and g.uuid.startswith(token))]
        if len(match) != 1:
            break
        if match[0] not in chosen:
            chosen.append(match[0])
    return tuple(chosen)


def map_owners(snapshots: Mapping[str, HostTelemetry],
               task_pids: Mapping[str, Mapping[int, str]],
               plan_masks: Mapping[str, Mapping[str, str]] | None = None,
               users: Mapping[str, Mapping[int, str]] | None = None,
               unknown_hosts: Collection[str] = ()) -> dict[GpuKey, Owner]:
    """Every GPU of every snapshot with its owner.

    task_pids: host → pid → task name (live processes of the run's tasks);
    plan_masks: host → task name → CUDA_VISIBLE_DEVICES (for `Owner.planned`);
    users: host → pid → user name, for foreign processes, where known;
    unknown_hosts: hosts whose tasks could not be read now (their `task_pids`, if any, are the
    last read): a process not among them is `unknown` there, not `foreign`.
    """
    owners: dict[GpuKey, Owner] = {}
    for host, snap in snapshots.items():
        pids = task_pids.get(host, {})
        who = (users or {}).get(host, {})
        blind = host in unknown_hosts
        planned: dict[str, list[str]] = {}
        for task, mask in (plan_masks or {}).get(host, {}).items():
            for gpu in gpus_in_mask(mask, snap.gpus):
                planned.setdefault(gpu.uuid, []).append(task)
        for gpu in snap.gpus:
            tasks: list[str] = []
            foreign: list[ForeignProcess] = []
            for proc in snap.processes_on(gpu.uuid):
                ours = pids.get(proc.pid)
                if ours is not None:
                    if ours not in tasks:
                        tasks.append(ours)
                else:
                    foreign.append(ForeignProcess(proc.pid, who.get(proc.pid),
                                                  proc.process_name, proc.used_memory_mib))
            strangers = tuple(foreign)
            owners[(host, gpu.uuid)] = Owner(
                host, gpu.uuid, gpu.index, tuple(tasks), () if blind else strangers,
                tuple(planned.get(gpu.uuid, ())), strangers if blind else (), blind)
    return owners


def masked_gpus_without_process(snapshots: Mapping[str, HostTelemetry],
                                task_pids: Mapping[str, Mapping[int, str]],
                                plan_masks: Mapping[str, Mapping[str, str]]
                                ) -> tuple[MaskMiss, ...]:
    """Running tasks (those with live pids) whose mask names a GPU showing none of their
    processes: the mask did not take, or TF placed the work elsewhere. Hosts without a sample
    (no snapshot GPUs) are not judged."""
    misses: list[MaskMiss] = []
    for host, masks in plan_masks.items():
        snap = snapshots.get(host)
        if snap is None or not snap.gpus:
            continue
        pids = task_pids.get(host, {})
        for task, mask in masks.items():
            own = {pid for pid, name in pids.items() if name == task}
            if not own:
                continue
            for gpu in gpus_in_mask(mask, snap.gpus):
                if not any(p.pid in own for p in snap.processes_on(gpu.uuid)):
                    misses.append(MaskMiss(host, task, gpu.uuid, gpu.index, mask))
    return tuple(misses)


def owner_lookup(owners: Mapping[GpuKey, Owner]) -> Callable[[str, str], str]:
    """An `OwnerOf` for the dashboard: (host, uuid) → label; "unknown" for a GPU not mapped."""

    def owner_of(host: str, uuid: str) -> str:
        owner = owners.get((host, uuid))
        return owner.label if owner is not None else "unknown"

    return owner_of


def pids_by_host(tasks: Iterable[TaskProcesses]) -> dict[str, dict[int, str]]:
    """host → pid → task name, from task records."""
    out: dict[str, dict[int, str]] = {}
    for task in tasks:
        for pid in task.pids:
            out.setdefault(task.host, {})[pid] = task.name
    return out


def masks_by_host(tasks: Iterable[TaskProcesses]) -> dict[str, dict[str, str]]:
    """host → task name → mask, for tasks that have a non-empty mask."""
    out: dict[str, dict[str, str]] = {}
    for task in tasks:
        if task.mask:
            out.setdefault(task.host, {})[task.name] = task.mask
    return out


def task_from_status(host: str, raw: TaskRecord | Mapping[str, Any]) -> TaskProcesses:
    """One task of the agent's `status` answer (its record, or the record's wire data)."""
    record = TaskRecord.from_wire(raw)
    lines = record.last_lines
    return TaskProcesses(
        host=host, name=record.name, state=record.state,
        pids=tuple(sorted({int(p) for p in record.pids})), mask=record.mask,
        log_size_bytes=record.log_size_bytes, last_line=str(lines[-1]) if lines else "",
        uptime_s=record.uptime_s)


# -- blocking: one round trip per host ---------------------------------------------------------


def read_task_processes(fleet: Fleet, run_id: str, hosts: Sequence[str]
                        ) -> tuple[tuple[TaskProcesses, ...], dict[str, str], tuple[Silence, ...]]:
    """Every task of the run on these hosts (from the agent's `status`), the hosts that could
    not be read (host → why), and those whose watcher cannot reach the chief (`silences`)."""
    tasks, unreachable, silences, _idle = read_run_hosts(fleet, run_id, hosts)
    return tasks, unreachable, silences


def read_run_hosts(fleet: Fleet, run_id: str, hosts: Sequence[str]
                   ) -> tuple[tuple[TaskProcesses, ...], dict[str, str], tuple[Silence, ...],
                              dict[str, dict[str, Any]]]:
    """`read_task_processes`'s answer, and host → the run's GPUs there warned idle by the lab's
    policy (`idle.json`: since, stop_at, gpus; docs/policy.md)."""
    answers = fleet.map(lambda t: agentops.status(t, t.host.workdir, run_id, tail=1), hosts)
    tasks = [task_from_status(host, raw) for host, answer in answers.succeeded.items()
             for raw in answer.tasks]
    silences = tuple(s for host, answer in answers.succeeded.items()
                     for s in silences_from(host, answer.silences))
    idle = {host: dict(answer.idle) for host, answer in answers.succeeded.items() if answer.idle}
    return (tuple(tasks), {host: str(exc) for host, exc in answers.failed.items()}, silences,
            idle)


def task_pids(fleet: Fleet, run_id: str, hosts: Sequence[str]) -> dict[str, dict[int, str]]:
    """host → pid → task name of every live process of the run's tasks on these hosts."""
    tasks, _, _ = read_task_processes(fleet, run_id, hosts)
    return pids_by_host(tasks)


def process_users(fleet: Fleet, pids: Mapping[str, Iterable[int]]) -> dict[str, dict[int, str]]:
    """host → pid → user name (owner of /proc/<pid>), for pids still alive. Linux hosts."""
    wanted = {host: sorted(set(p)) for host, p in pids.items() if p}
    if not wanted:
        return {}

    def lookup(transport: Any) -> dict[int, str]:
        listed = " ".join(str(p) for p in wanted[transport.host.name])
        script = (f"for p in {listed}; do u=$(stat -c %U /proc/$p 2>/dev/null) "
                  f"&& printf '%s %s\\n' \"$p\" \"$u\"; done; true")
        result = transport.run("sh -c " + shlex.quote(script), timeout_s=10.0)
        found: dict[int, str] = {}
        for line in result.stdout.splitlines():
            pid, _, user = line.partition(" ")
            if pid.isdigit() and user.strip():
                found[int(pid)] = user.strip()
        return found

    return dict(fleet.map(lookup, list(wanted)).succeeded)


class OwnerCache:
    """The run's task processes as last read, for a UI that must not block.

    `refresh(run_id, hosts)` blocks (one agent round trip per host, plus a user lookup for
    foreign pids): call it from a worker thread every few seconds. `owners(snapshots)` and
    `owner_of(host, uuid)` combine the cached pids with the telemetry's latest snapshots.
    """

    def __init__(self, fleet: Fleet, snapshots: Callable[[], Mapping[str, HostTelemetry]]):
        self.fleet = fleet
        self._snapshots = snapshots
        self._lock = threading.Lock()
        self.tasks: tuple[TaskProcesses, ...] = ()  # as read now (hosts that failed: none)
        self.unreachable: dict[str, str] = {}  # hosts whose tasks could not be read → why
        self.silences: tuple[Silence, ...] = ()  # hosts that cannot reach the chief, as read
        self.idle: dict[str, dict[str, Any]] = {}  # host → the run warned idle there (policy)
        self._users: dict[str, dict[int, str]] = {}
        self._last: dict[str, tuple[TaskProcesses, ...]] = {}  # each host's last good read
        self._run_id: str | None = None

    def refresh(self, run_id: str | None, hosts: Sequence[str]) -> tuple[TaskProcesses, ...]:
        tasks: tuple[TaskProcesses, ...] = ()
        unreachable: dict[str, str] = {}
        silences: tuple[Silence, ...] = ()
        idle: dict[str, dict[str, Any]] = {}
        if run_id is not None and hosts:
            tasks, unreachable, silences, idle = read_run_hosts(self.fleet, run_id, hosts)
        ours = pids_by_host(tasks)
        foreign = {host: [p.pid for p in snap.processes if p.pid not in ours.get(host, {})]
                   for host, snap in self._snapshots().items() if host not in unreachable}
        users = process_users(self.fleet, foreign)  # not on hosts that just did not answer
        last = dict(self._last) if run_id == self._run_id else {}
        for host in hosts:
            if host not in unreachable:
                last[host] = tuple(t for t in tasks if t.host == host)
        with self._lock:
            self.tasks, self.unreachable, self._users = tasks, unreachable, users
            self.silences, self.idle = silences, idle
            self._last, self._run_id = last, run_id
        return tasks

    def owners(self, snapshots: Mapping[str, HostTelemetry] | None = None
               ) -> dict[GpuKey, Owner]:
        """Owners now; on a host that failed its last read, our tasks as last read (`stale`)
        and any other process `unknown`."""
        with self._lock:
            tasks, users, unreachable = self.tasks, self._users, set(self.unreachable)
            known = tasks + tuple(t for h in unreachable for t in self._last.get(h, ()))
        snaps = self._snapshots() if snapshots is None else snapshots
        return map_owners(snaps, pids_by_host(known), masks_by_host(known), users, unreachable)

    def owner_of(self, host: str, uuid: str) -> str:
        """`tfctl.tui.app.sources.OwnerOf`: a label, never blocking."""
        snap = self._snapshots().get(host)
        if snap is None:
            return "unknown"
        return owner_lookup(self.owners({host: snap}))(host, uuid)
