"""`tfctl lab` as data: one row per GPU of every host — free, reserved, or held — pure.

From one host's `lab` answer (remote/agent/lab.py): nvidia-smi's GPUs and compute apps, who each
process is (/proc), the claims (remote/lab/claims.py) and the idle sampler's measure. A process
on a GPU is a tfctl run's when a live run claim records its pid or process group (any user's
run), or when its own environment says so (ours, which we may read); anyone else's process is
shown with its user, pid, command, memory and since when. A holder is `idle` when the sampler
has seen its GPU under 5 % utilization, with that process on it, in every sample for at least
`idle_after_s` (measured on the host, never guessed from one look).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from tfctl.remote.agent.lab import NO_NVIDIA_SMI
from tfctl.remote.agent.vocab import GpuState
from tfctl.remote.lab.claims import Claim, HostClaims, clock, gpu_indices, host_claims
from tfctl.remote.lab.idle import idle_line

State = Literal["free", "reserved", "held", "cpu", "error"]
"""A row's state; `cpu`: a host the inventory gives no GPUs (`gpus: 0`) and nvidia-smi nothing
to show (none there, or it lists no GPU): CPU only, as it should be, not an error."""
CPU_ONLY = "CPU only"
IDLE_AFTER_S = 600.0


@dataclass(frozen=True)
class Holder:
    """Who holds a GPU: a tfctl run's task, or any other process."""

    kind: Literal["run", "process"]
    user: str | None
    pid: int | None
    command: str | None = None
    memory_mib: float | None = None
    since_s: float | None = None
    run_id: str | None = None
    job: str | None = None
    task: str | None = None
    low_util_s: float | None = None
    """How long the host's sampler has seen this holder's GPU under 5 % with it on it (None:
    not measured: utilization above, or the sampler has no recent sample)."""
    idle: bool = False
    """`low_util_s` is at least the threshold asked for."""
    policy_idle_since_s: float | None = None
    """A run the lab's policy has warned as idle: since when, and when it stops it."""
    policy_stop_at_s: float | None = None
    session: str = ""
    """The session the run is ("notebook", "shell"), "" for another run or a process."""

    def policy_words(self, now_s: float) -> str | None:
        """`idle 1:05 — stops at 14:30 by the lab's policy`, for a run the policy warned."""
        if self.policy_idle_since_s is None or self.policy_stop_at_s is None:
            return None
        return idle_line(self.policy_idle_since_s, self.policy_stop_at_s, now_s)

    def who_what(self) -> tuple[str, str]:
        if self.kind == "run":
            job = f" (job {self.job})" if self.job else ""
            kind = self.session or "run"
            return self.user or "?", f"{kind} {self.run_id}{job} {self.task or ''}".rstrip()
        return self.user or "?", f"pid {self.pid} {self.command or ''}".rstrip()


@dataclass(frozen=True)
class LabRow:
    host: str
    index: int | None
    state: State
    name: str | None = None
    uuid: str | None = None
    utilization_pct: float | None = None
    memory_used_mib: float | None = None
    memory_total_mib: float | None = None
    holders: tuple[Holder, ...] = ()
    reservation: Claim | None = None
    stale: tuple[Claim, ...] = ()
    error: str | None = None


@dataclass(frozen=True)
class HostLab:
    host: str
    rows: tuple[LabRow, ...]
    claims: HostClaims
    warnings: tuple[str, ...] = ()
    watching_since_s: float | None = None
    """Since when the host's idle sampler has sampled without a gap (None: no recent sample)."""
    reachable: bool = True
    week_held: Mapping[str, Sequence[float]] = field(default_factory=dict)
    """User → [GPU-seconds held, of them idle] on this host in the last 7 days (the ledger)."""
    week_shares: Mapping[str, float] = field(default_factory=dict)
    """User → share of the lab's GPU-seconds held this week, over every host that answered
    (`with_shares`)."""


def _holder(pid: int, info: Mapping[str, Any] | None, memory: float | None,
            runs: Sequence[Claim], index: int, low: Mapping[str, Any], sampled_at: float | None,
            idle_after_s: float) -> Holder:
    info = info or {}
    since_low = low.get(str(pid))
    low_s = None if since_low is None or sampled_at is None else max(0.0,
                                                                     sampled_at - since_low)
    idle = low_s is not None and low_s >= idle_after_s
    for claim in runs:
        task = claim.task_of(pid, info.get("pgid"))
        if task is not None:
            return Holder("run", claim.user, pid, info.get("cmdline"), memory, claim.since_s,
                          claim.run_id, claim.job, task.name, low_s, idle,
                          claim.idle_since_s, claim.idle_stop_at_s, claim.session)
    if info.get("tfctl_run_id"):  # our own run (we may read our processes' environment)
        session = next((c.session for c in runs if c.run_id == info["tfctl_run_id"]), "")
        return Holder("run", info.get("user"), pid, info.get("cmdline"), memory,
                      info.get("since"), info["tfctl_run_id"], None, info.get("tfctl_task"),
                      low_s, idle, session=session)
    return Holder("process", info.get("user"), pid, info.get("cmdline"), memory,
                  info.get("since"), low_util_s=low_s, idle=idle)


def host_lab(host: str, answer: GpuState, idle_after_s: float = IDLE_AFTER_S,
             cpu_only: bool = False) -> HostLab:
    """One host's `lab` (or `gpu_state`) answer as rows, one per GPU. `cpu_only`: the
    inventory gives the host no GPUs (`gpus: 0`), so a host without nvidia-smi, or whose
    nvidia-smi lists no GPU, is one row `cpu` ("CPU only"); where the inventory selects GPUs
    that is an error. A host with GPUs shows them whatever the inventory says (the lab is
    every user's)."""
    found = host_claims(host, answer)
    gpus = answer.gpus
    warnings = (*found.warnings, *answer.ledger_warnings)
    if cpu_only and not gpus and answer.error in (None, NO_NVIDIA_SMI):
        row = LabRow(host, None, "cpu")
        return HostLab(host, (row,), found, warnings, week_held=answer.week_held)
    if answer.error or not gpus:
        row = LabRow(host, None, "error", error=str(answer.error or "nvidia-smi lists no GPUs"))
        return HostLab(host, (row,), found, warnings, week_held=answer.week_held)
    uuids = {str(g["uuid"]): int(g["index"]) for g in gpus}
    idle = answer.idle or {}
    sampled_at = idle.get("sampled_at")
    runs = [c for c in found.claims if c.kind == "run" and c.live]
    rows = []
    for gpu in gpus:
        index = int(gpu["index"])
        low = (idle.get("low_since") or {}).get(str(index)) or {}
        holders = [_holder(int(a["pid"]), answer.procs.get(str(a["pid"])),
                           a.get("used_memory_mib"), runs, index, low, sampled_at, idle_after_s)
                   for a in answer.apps if a.get("gpu_uuid") == gpu["uuid"]
                   and answer.procs.get(str(a["pid"])) is not None]
        seen_runs = {h.run_id for h in holders if h.kind == "run"}
        for claim in runs:  # a run that claims the GPU holds it, on it yet or not
            task = claim.task_on(index, uuids)
            if task is not None and claim.run_id not in seen_runs:
                holders.append(Holder("run", claim.user, task.pid, None, None, claim.since_s,
                                      claim.run_id, claim.job, task.name,
                                      policy_idle_since_s=claim.idle_since_s,
                                      policy_stop_at_s=claim.idle_stop_at_s,
                                      session=claim.session))
                seen_runs.add(claim.run_id)
        named = [c for c in found.claims if index in gpu_indices(c.gpus, uuids)]
        reservation = next((c for c in named if c.kind == "reservation" and c.live), None)
        stale = tuple(c for c in named if not c.live)
        state: State = "held" if holders else "reserved" if reservation else "free"
        rows.append(LabRow(host, index, state, gpu.get("name"), gpu.get("uuid"),
                           gpu.get("utilization_pct"), gpu.get("memory_used_mib"),
                           gpu.get("memory_total_mib"), tuple(holders), reservation, stale))
    watching = idle.get("watching_since") if sampled_at is not None else None
    return HostLab(host, tuple(rows), found, warnings, watching, week_held=answer.week_held)


def with_shares(hosts: Sequence[HostLab]) -> list[HostLab]:
    """The hosts with each user's share of the week's GPU-seconds, over every host that
    answered (one number for the whole lab, so each host carries the same)."""
    from tfctl.remote.lab.usage import shares

    found = shares(h.week_held for h in hosts if h.reachable)
    return [replace(h, week_shares=found) for h in hosts]


def unreachable(host: str, error: str) -> HostLab:
    return HostLab(host, (LabRow(host, None, "error", error=error),), HostClaims(host, None, None),
                   reachable=False)


# ---------------------------------------------------------------- words and JSON

def minutes(seconds: float) -> str:
    return f"{int(seconds // 60)} min" if seconds >= 60 else f"{int(seconds)} s"


def who_words(user: str | None, shares: Mapping[str, float] | None) -> str:
    """`alice (31 % this week)`: a user and their share of the lab's GPU time this week."""
    share = (shares or {}).get(user or "")
    return user or "?" if share is None else f"{user} ({share * 100:.0f} % this week)"


def row_cells(row: LabRow, shares: Mapping[str, float] | None = None) -> dict[str, str]:
    """The table's cells of a row: state, who, what, since, util, memory, note; `shares`: each
    user's share of the lab's GPU time this week, said beside them."""
    cells = {"state": row.state, "who": "", "what": "", "since": "", "util": "", "mem": "",
             "note": ""}
    if row.error:
        cells["what"] = row.error
        return cells
    if row.state == "cpu":
        cells["what"] = CPU_ONLY
        return cells
    if row.utilization_pct is not None:
        cells["util"] = f"{row.utilization_pct:.0f} %"
    if row.memory_used_mib is not None and row.memory_total_mib is not None:
        cells["mem"] = f"{row.memory_used_mib:.0f}/{row.memory_total_mib:.0f} MiB"
    notes = []
    if row.holders:
        pairs = [h.who_what() for h in row.holders]
        cells["who"] = ", ".join(who_words(u, shares) for u in dict.fromkeys(p[0] for p in pairs))
        cells["what"] = "; ".join(p[1] for p in pairs)
        since = [h.since_s for h in row.holders if h.since_s is not None]
        cells["since"] = clock(min(since)) if since else ""
        now_s = time.time()
        notes += [h.policy_words(now_s) or "" for h in row.holders if h.policy_words(now_s)]
        notes += [f"idle {minutes(h.low_util_s or 0)} (pid {h.pid})" if len(row.holders) > 1
                  else f"idle {minutes(h.low_util_s or 0)}" for h in row.holders
                  if h.idle and h.policy_words(now_s) is None]
        if row.reservation is not None:
            notes.append(row.reservation.words())
    elif row.reservation is not None:
        r = row.reservation
        cells["who"], cells["since"] = who_words(r.user, shares), clock(r.since_s)
        cells["what"] = f"until {clock(r.until_s)}" + (f" ({r.note})" if r.note else "")
    notes += [f"stale claim: {c.user}'s run {c.run_id} (its processes are gone)"
              if c.kind == "run" else f"expired: {c.user}'s reservation" for c in row.stale]
    cells["note"] = "; ".join(notes)
    return cells


def _claim_json(claim: Claim) -> dict[str, Any]:
    return {"user": claim.user, "uid": claim.uid, "kind": claim.kind, "state": claim.state,
            "run_id": claim.run_id, "job": claim.job, "since": claim.since_s,
            "until": claim.until_s, "note": claim.note, "gpus": list(claim.gpus),
            "file": claim.file}


def row_json(row: LabRow, shares: Mapping[str, float] | None = None) -> dict[str, Any]:
    """A row as `lab --json` prints it; `week_share`: each holder's (or the reserver's) share
    of the lab's GPU time this week."""
    users = [h.user for h in row.holders] + ([row.reservation.user] if row.reservation else [])
    return {"week_share": {u: round(shares[u], 4) for u in users if u and shares and u in shares},
            "host": row.host, "gpu": row.index, "state": row.state, "name": row.name,
            "uuid": row.uuid, "utilization_pct": row.utilization_pct,
            "memory_used_mib": row.memory_used_mib, "memory_total_mib": row.memory_total_mib,
            "holders": [{"kind": h.kind, "user": h.user, "pid": h.pid, "command": h.command,
                         "memory_mib": h.memory_mib, "since": h.since_s, "run_id": h.run_id,
                         "job": h.job, "task": h.task, "low_util_s": h.low_util_s,
                         "idle": h.idle, "policy_idle_since": h.policy_idle_since_s,
                         "policy_stop_at": h.policy_stop_at_s, "session": h.session}
                        for h in row.holders],
            "reservation": None if row.reservation is None else _claim_json(row.reservation),
            "stale_claims": [_claim_json(c) for c in row.stale], "error": row.error}
