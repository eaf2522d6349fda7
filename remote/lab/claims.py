"""The claims a host's agent read (remote/agent/claims.py) as records, and what they forbid; pure.

A claim says which user's run or reservation holds which GPUs of a host (docs/claims.md). The
agent has already checked each file (owner from the file, never from its content) and given it a
state: `live`, `stale` (a run whose processes are gone: shown, never obeyed) or `expired` (a
reservation past its end). Here: the records, how a claim is said to a person, and which of them
stand in the way of a plan's GPUs (`blocking`): another user's live run or reservation; the
user's own reservation is theirs to use.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tfctl.remote.agent.vocab import ClaimsAnswer

GpuToken = int | str
"""A GPU as a claim names it: its nvidia-smi index, or a UUID from a mask."""


@dataclass(frozen=True)
class ClaimTask:
    name: str
    gpus: tuple[GpuToken, ...]
    pid: int | None
    pgid: int | None


@dataclass(frozen=True)
class Claim:
    host: str
    """The inventory's name of the host whose agent read it."""
    file: str
    user: str
    """The file's owner (the agent's lstat/fstat), never what the file says."""
    uid: int
    kind: str
    """`run` or `reservation`."""
    state: str
    """`live`, `stale` or `expired`."""
    gpus: tuple[GpuToken, ...]
    run_id: str | None = None
    job: str | None = None
    since_s: float | None = None
    until_s: float | None = None
    note: str | None = None
    tasks: tuple[ClaimTask, ...] = ()
    idle_since_s: float | None = None
    """A run idle under the lab policy, its owner warned: since when (agent/idlewatch.py)."""
    idle_stop_at_s: float | None = None
    """… and when the policy stops it unless it is used again."""
    session: str = ""
    """The session the run is ("notebook", "shell": inventory/session.py), "" for none."""

    @property
    def live(self) -> bool:
        return self.state == "live"

    def task_of(self, pid: int, pgid: int | None) -> ClaimTask | None:
        """The task of this run whose process (or process group) `pid` is."""
        for task in self.tasks:
            if task.pid == pid or (pgid is not None and task.pgid == pgid):
                return task
        return None

    def task_on(self, index: int, uuids: Mapping[str, int | None] | None = None
                ) -> ClaimTask | None:
        for task in self.tasks:
            if index in gpu_indices(task.gpus, uuids or {}):
                return task
        return None

    def words(self) -> str:
        """`reserved by bob until 2026-11-28 12:00 UTC (ICML runs)` or `held by alice's run
        R1 (job mnist) since 2026-11-25 10:00 UTC`."""
        if self.kind == "reservation":
            note = f" ({self.note})" if self.note else ""
            return f"reserved by {self.user} until {clock(self.until_s)}{note}"
        job = f" (job {self.job})" if self.job else ""
        return f"held by {self.user}'s run {self.run_id}{job} since {clock(self.since_s)}"


@dataclass(frozen=True)
class HostClaims:
    host: str
    me_uid: int | None
    me_user: str | None
    claims: tuple[Claim, ...] = ()
    warnings: tuple[str, ...] = ()

    def theirs(self) -> tuple[Claim, ...]:
        return tuple(c for c in self.claims if c.uid != self.me_uid)


def clock(wall_s: float | None) -> str:
    if wall_s is None:
        return "?"
    return time.strftime("%Y-%m-%d %H:%M %Z", time.localtime(wall_s))


def _tokens(raw: Any) -> tuple[GpuToken, ...]:
    return tuple(g for g in (raw or ()) if isinstance(g, (int, str)) and not isinstance(g, bool))


def claim_of(host: str, raw: Mapping[str, Any]) -> Claim:
    tasks = tuple(ClaimTask(str(t.get("name")), _tokens(t.get("gpus")), t.get("pid"),
                            t.get("pgid")) for t in raw.get("tasks") or ())
    idle = raw.get("idle") or {}
    return Claim(host, str(raw["file"]), str(raw["user"]), int(raw["uid"]), str(raw["kind"]),
                 str(raw["state"]), _tokens(raw.get("gpus")), raw.get("run_id"), raw.get("job"),
                 raw.get("since"), raw.get("until"), raw.get("note"), tasks,
                 idle.get("since"), idle.get("stop_at"), str(raw.get("session") or ""))


def host_claims(host: str, found: ClaimsAnswer | None) -> HostClaims:
    """The agent's `claims` answer (or the `claims` part of `up_check`'s, or of `lab`'s and
    `gpu_state`'s) as records."""
    if found is None:
        return HostClaims(host, None, None)
    me = found.me
    return HostClaims(host, None if me is None else me.uid, None if me is None else me.user,
                      tuple(claim_of(host, c) for c in found.claims),
                      tuple(f"{host}: {w}" for w in found.warnings))


def gpu_indices(tokens: Iterable[GpuToken], uuids: Mapping[str, int | None]) -> tuple[int, ...]:
    """Claim GPU tokens as nvidia-smi indices (a UUID looked up; unknown ones dropped)."""
    out: list[int] = []
    for token in tokens:
        index = token if isinstance(token, int) else (
            int(token) if token.isdigit() else uuids.get(token))
        if index is not None and index not in out:
            out.append(index)
    return tuple(out)


def blocking(found: HostClaims, indices: Sequence[int], uuids: Mapping[str, int | None],
             own_run_id: str | None = None) -> list[tuple[int, Claim]]:
    """(GPU, claim) for each of `indices` that another user's live run or reservation holds."""
    out = []
    for claim in found.theirs():
        if not claim.live or (own_run_id is not None and claim.run_id == own_run_id):
            continue
        for index in gpu_indices(claim.gpus, uuids):
            if index in indices:
                out.append((index, claim))
    return sorted(out, key=lambda pair: (pair[0], pair[1].kind, pair[1].user))
