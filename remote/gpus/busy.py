"""Before launch: who else computes on the GPUs the plan assigns (lab etiquette).

A lab is shared: launching onto a GPU a colleague's job uses ruins both runs. Per host that the
plan gives GPU tasks, one SSH round trip runs nvidia-smi twice (the index↔UUID map and the
compute apps, which name GPUs by UUID only); only when a process sits on an assigned GPU, one
agent call reads its owner, command and tfctl tags from /proc. GPUs are compared by nvidia-smi
index, which is what the plan's masks mean (every task runs with CUDA_DEVICE_ORDER=PCI_BUS_ID).

Pure parts (`parse_nvsmi_output`, `judge_gpus_busy`) are separate from the I/O (`read_host`,
`find_busy_gpus`) so they can be table-tested.
"""

from __future__ import annotations

import functools
import shlex
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tfctl.inventory.plan import Plan
from tfctl.remote.connect.fleet import Fleet
from tfctl.remote.connect.host_scripts import host_script, render
from tfctl.remote.connect.session import agentops
from tfctl.remote.connect.session.agentops import ClaimsAnswer
from tfctl.remote.connect.transport import Transport
from tfctl.remote.errors import RemoteError
from tfctl.remote.gpus.nvsmi import (
    DEFAULT_COMPUTE_APP_FIELDS,
    GpuProcess,
    HostError,
    parse_compute_apps,
    parse_gpu_rows,
    query_compute_apps_argv,
    query_gpu_argv,
)
from tfctl.remote.lab.claims import Claim, HostClaims, blocking, host_claims

_MARK = "@@tfctl-gpus:"
GPU_FIELDS = ("index", "uuid")
# The host-side program is `remote/agent/gpus_busy.sh`; `nvsmi_script()` fills it in.
NO_NVIDIA_SMI = "no nvidia-smi on the PATH there"


@functools.lru_cache(maxsize=1)
def nvsmi_script() -> str:
    """The shell program (`remote/agent/gpus_busy.sh`) that lists the host's GPUs and their
    compute processes."""
    return render(host_script("gpus_busy.sh"), MARK=_MARK,
                  QUERY_GPUS=shlex.join(query_gpu_argv(GPU_FIELDS)),
                  QUERY_APPS=shlex.join(query_compute_apps_argv(DEFAULT_COMPUTE_APP_FIELDS)))


@dataclass(frozen=True)
class GpuUser:
    """A compute process on a GPU the plan assigns: what a person needs to go and ask."""

    host: str
    gpu_index: int | None
    gpu_uuid: str
    pid: int
    user: str | None
    """None when the host does not show the process (another pid namespace) or it just ended."""
    used_memory_mib: float | None
    command: str | None
    tfctl_run_id: str | None = None
    tfctl_task: str | None = None

    def describe(self) -> str:
        """`GPU 0: pid 4242 (user alice, 1500 MiB, python train.py)`."""
        gpu = f"GPU {self.gpu_index}" if self.gpu_index is not None else self.gpu_uuid
        parts = [f"user {self.user or '?'}"]
        if self.used_memory_mib is not None:
            parts.append(f"{self.used_memory_mib:.0f} MiB")
        if self.command:
            parts.append(self.command if len(self.command) <= 60 else self.command[:59] + "…")
        run = ""
        if self.tfctl_run_id:
            run = f"; tfctl run {self.tfctl_run_id} {self.tfctl_task or ''}".rstrip()
        return f"{gpu}: pid {self.pid} ({', '.join(parts)}){run}"


@dataclass(frozen=True)
class ClaimedGpu:
    """A GPU the plan assigns that another user's live claim holds: a reservation, or a run
    (remote/lab/claims.py) whose process is not (yet) seen on it."""

    host: str
    gpu_index: int
    claim: Claim

    def describe(self) -> str:
        """`GPU 1: reserved by bob until 2026-11-28 12:00 UTC (ICML runs)`."""
        return f"GPU {self.gpu_index}: {self.claim.words()}"


@dataclass(frozen=True)
class HostGpus:
    """One host's GPUs as far as the busy check is concerned."""

    host: str
    assigned: tuple[int, ...] = ()
    """nvidia-smi indices the plan's masks on this host name."""
    listed: tuple[int, ...] = ()
    """Indices nvidia-smi lists there."""
    busy: tuple[GpuUser, ...] = ()
    """Processes (of other users or other runs) on assigned GPUs."""
    free: tuple[int, ...] = ()
    """Listed GPUs with no compute process at all."""
    error: str | None = None
    """Why the GPUs could not be read (no nvidia-smi, NVML failure), or None."""
    claimed: tuple[ClaimedGpu, ...] = ()
    """Assigned GPUs other users reserved, or their runs claim, beyond the processes seen."""
    warnings: tuple[str, ...] = ()
    """Claims skipped on the host (malformed, a link, named after another owner)."""


@dataclass(frozen=True)
class BusyReport:
    hosts: Mapping[str, HostGpus] = field(default_factory=dict)
    unreachable: Mapping[str, RemoteError] = field(default_factory=dict)

    @property
    def busy(self) -> tuple[GpuUser | ClaimedGpu, ...]:
        """Every reason to refuse: processes on assigned GPUs, and other users' claims."""
        found: list[GpuUser | ClaimedGpu] = []
        for h in self.hosts.values():
            found += [*h.busy, *h.claimed]
        return tuple(found)

    def busy_lines(self) -> list[str]:
        """`h2: GPU 0: pid 4242 (user alice, 1500 MiB, sleep 300)`, one per process and GPU;
        `h1: GPU 1: reserved by bob until …`, one per claim."""
        return [f"{u.host}: {u.describe()}" for u in self.busy]

    def free_text(self) -> str:
        """`h1: 1, 3; h2: none`: the GPUs nobody computes on or claims, per host with busy
        GPUs."""
        hosts = [h for h in self.hosts.values() if h.busy or h.claimed]
        return "; ".join(f"{h.host}: {', '.join(map(str, h.free)) or 'none'}" for h in hosts)

    def unknown_lines(self) -> list[str]:
        """Hosts whose GPUs could not be checked, one line each; claims skipped there."""
        lines = [f"{h.host}: cannot check its GPUs: {h.error}"
                 for h in self.hosts.values() if h.error]
        lines += [w for h in self.hosts.values() for w in h.warnings]
        return lines + [f"{name}: cannot check its GPUs: {exc}"
                        for name, exc in self.unreachable.items()]


# ---------------------------------------------------------------- pure

def mask_tokens(plan: Plan, host: str) -> tuple[str, ...]:
    """The device tokens (indices, or UUIDs) in the masks of `host`'s tasks, in order, unique."""
    seen: list[str] = []
    for task in plan.on_host(host):
        for token in (t.strip() for t in task.cuda_visible_devices.split(",")):
            if token and token not in seen:
                seen.append(token)
    return tuple(seen)


def parse_nvsmi_output(stdout: str) -> tuple[dict[str, int | None], list[GpuProcess],
                                               str | None]:
    """`nvsmi_script()`'s output → (uuid → index, compute apps, error or None)."""
    if stdout.strip() == _MARK + "none":
        return {}, [], NO_NVIDIA_SMI
    gpu_text, _, apps_text = stdout.partition(_MARK + "apps")
    listing = parse_gpu_rows(gpu_text, GPU_FIELDS)
    gpus = {s.uuid: s.index for s in listing.samples}
    if not gpus:
        errors = [e for e in listing.errors if not HostError(e).is_no_devices]
        if errors:
            return {}, [], "nvidia-smi failed: " + "; ".join(errors)
        return {}, [], "nvidia-smi lists no GPUs"
    return gpus, parse_compute_apps(apps_text, DEFAULT_COMPUTE_APP_FIELDS), None


def assigned_indices(tokens: Iterable[str], gpus: Mapping[str, int | None]) -> tuple[int, ...]:
    """Mask tokens as nvidia-smi indices (a UUID token is looked up; unknown ones dropped)."""
    out: list[int] = []
    for token in tokens:
        index = int(token) if token.isdigit() else gpus.get(token)
        if index is not None and index not in out:
            out.append(index)
    return tuple(out)


def judge_gpus_busy(host: str, tokens: Sequence[str], gpus: Mapping[str, int | None],
               apps: Sequence[GpuProcess], procs: Mapping[int, Mapping[str, Any] | None],
               own_run_id: str | None = None, claims: HostClaims | None = None) -> HostGpus:
    """Which assigned GPUs hold someone else's compute process or claim, and which are free.

    `procs` is the agent's `procs` answer (pid → describe_process, None when gone). A process
    gone since nvidia-smi listed it no longer counts; one of `own_run_id` never does. `claims`
    (remote/lab/claims.py): another user's live reservation or run on an assigned GPU refuses
    it too, and a process of another user's run is named as that run's; the user's own
    reservations are theirs to use; a stale claim is never obeyed.
    """
    claims = claims or HostClaims(host, None, None)
    assigned = assigned_indices(tokens, gpus)
    listed = tuple(sorted(i for i in gpus.values() if i is not None))
    runs = [c for c in claims.theirs() if c.kind == "run" and c.live]
    used = {a.gpu_uuid for a in apps}
    held = {index for index, _ in blocking(claims, listed, gpus)}
    free = tuple(sorted(i for u, i in gpus.items() if i is not None and u not in used
                        and i not in held))
    busy: list[GpuUser] = []
    for app in apps:
        index = gpus.get(app.gpu_uuid)
        if index not in assigned:
            continue
        if app.pid in procs and procs[app.pid] is None:
            continue  # ended between nvidia-smi and /proc
        info = procs.get(app.pid) or {}
        run, task = info.get("tfctl_run_id"), info.get("tfctl_task")
        for claim in runs:
            found = claim.task_of(app.pid, info.get("pgid"))
            if found is not None:  # another user's run: its environment is not ours to read
                run, task = claim.run_id, found.name
                break
        if own_run_id is not None and run == own_run_id:
            continue
        busy.append(GpuUser(host, index, app.gpu_uuid, app.pid, info.get("user"),
                            app.used_memory_mib, info.get("cmdline") or app.process_name,
                            run, task))
    seen = {(u.gpu_index, u.tfctl_run_id) for u in busy}
    claimed = tuple(ClaimedGpu(host, index, claim) for index, claim
                    in blocking(claims, assigned, gpus, own_run_id)
                    if claim.kind == "reservation" or (index, claim.run_id) not in seen)
    return HostGpus(host, assigned, listed, tuple(busy), free, claimed=claimed,
                    warnings=claims.warnings)


# ---------------------------------------------------------------- I/O

def read_host(t: Transport, tokens: Sequence[str], own_run_id: str | None = None) -> HostGpus:
    """One host: nvidia-smi in one round trip, the claims, then /proc for the pids on
    assigned GPUs."""
    res = t.run("sh -c " + shlex.quote(nvsmi_script()), timeout_s=30)
    return judge_listing(t, res.stdout, tokens, own_run_id)


def judge_listing(t: Transport, stdout: str, tokens: Sequence[str],
                  own_run_id: str | None = None,
                  claims: ClaimsAnswer | None = None) -> HostGpus:
    """One host's `nvsmi_script()` output judged (read by `read_host`, or by `up`'s one check
    per host, which brings the host's `claims` along; without them the agent is asked); the
    agent is asked about the pids only when some sit on assigned GPUs."""
    host = t.host.name
    gpus, apps, error = parse_nvsmi_output(stdout)
    if error is not None:
        return HostGpus(host, error=error)
    if claims is None:
        claims = agentops.claims(t)
    assigned = assigned_indices(tokens, gpus)
    pids = sorted({a.pid for a in apps if gpus.get(a.gpu_uuid) in assigned})
    procs: dict[int, Mapping[str, Any] | None] = {}
    if pids:
        procs = agentops.procs(t, pids)
    return judge_gpus_busy(host, tokens, gpus, apps, procs, own_run_id, host_claims(host, claims))


def find_busy_gpus(fleet: Fleet, plan: Plan, hosts: Sequence[str] | None = None,
                   own_run_id: str | None = None) -> BusyReport:
    """Every host (of `hosts`) where the plan puts tasks on GPUs, checked in parallel."""
    chosen = [h for h in (plan.hosts_used if hosts is None else hosts) if mask_tokens(plan, h)]
    if not chosen:
        return BusyReport()
    result = fleet.map(lambda t: read_host(t, mask_tokens(plan, t.host.name), own_run_id),
                       chosen)
    return BusyReport(dict(result.succeeded), dict(result.failed))
