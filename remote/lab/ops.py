"""The lab's I/O: one agent request per host for `tfctl lab`, the claims for `reserve --list`,
reservations checked, made and released (remote/agent/lab.py on the hosts), and `tfctl
usage`'s ledger (remote/agent/ledger.py)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from tfctl.remote.connect.fleet import Fleet, FleetResult
from tfctl.remote.connect.session import agentops
from tfctl.remote.connect.session.agentops import ReleaseAnswer, ReserveAnswer
from tfctl.remote.connect.transport import Transport
from tfctl.remote.lab.claims import Claim, HostClaims, host_claims
from tfctl.remote.lab.usage import By, Usage, summarize
from tfctl.remote.lab.view import IDLE_AFTER_S, HostLab, host_lab, unreachable, with_shares


def read_lab(fleet: Fleet, idle_after_s: float = IDLE_AFTER_S,
             sample_s: float | None = None) -> list[HostLab]:
    """Every host of the inventory, in its order: one `lab` request each, in parallel. The idle
    sampler samples at least four times within `idle_after_s`. A host the inventory gives no
    GPUs is CPU only where nvidia-smi shows none (view.host_lab). Each user's share of the
    week's GPU time comes in the same answers (no request more)."""
    every = sample_s if sample_s is not None else min(10.0, max(1.0, idle_after_s / 4))
    found = fleet.map(lambda t: agentops.lab(t, t.host.workdir, sample_s=every))
    out = []
    for host in fleet.inventory.hosts:
        if host.name in found.succeeded:
            out.append(host_lab(host.name, found.succeeded[host.name], idle_after_s,
                                cpu_only=not host.gpus))
        else:
            out.append(unreachable(host.name, str(found.failed.get(host.name, "no answer"))))
    return with_shares(out)


def list_claims(fleet: Fleet, hosts: Sequence[str] | None = None
                ) -> tuple[list[HostClaims], dict[str, str]]:
    """The claims of every host (or `hosts`), and why a host could not say."""
    found = fleet.map(lambda t: agentops.claims(t), hosts)
    chosen = [h.name for h in fleet.inventory.hosts if hosts is None or h.name in hosts]
    return ([host_claims(h, found.succeeded[h]) for h in chosen if h in found.succeeded],
            {h: str(e) for h, e in found.failed.items()})


def live_reservations(found: Sequence[HostClaims]) -> list[tuple[str, Claim]]:
    """(host, reservation) of every live reservation, every user's, in the hosts' order."""
    return [(hc.host, claim) for hc in found for claim in hc.claims
            if claim.kind == "reservation" and claim.live]


@dataclass(frozen=True)
class Conflict:
    """A GPU asked for that another user has reserved."""

    host: str
    gpu: int
    claim: Claim

    def words(self) -> str:
        """`titan: GPU 2 is reserved by bob until … (ICML runs)`."""
        return f"{self.host}: GPU {self.gpu} is {self.claim.words()}"


def first_conflict(found: Sequence[HostClaims], wanted: Mapping[str, Sequence[int]]
                   ) -> Conflict | None:
    """The first GPU of `wanted` that another user's live reservation holds, or None."""
    for hc in found:
        for claim in hc.theirs():
            hit = [g for g in wanted.get(hc.host, ()) if g in claim.gpus]
            if hit and claim.kind == "reservation" and claim.live:
                return Conflict(hc.host, hit[0], claim)
    return None


def check_reservable(fleet: Fleet, wanted: Mapping[str, Sequence[int]]
                     ) -> tuple[Conflict | None, dict[str, str]]:
    """Whether `wanted` may be reserved without `--force`, every host asked before any
    reserves (all or nothing): the first other user's reservation in the way, and why a host
    could not say."""
    found, failed = list_claims(fleet, list(wanted))
    return (None if failed else first_conflict(found, wanted)), failed


def reserve(fleet: Fleet, targets: Mapping[str, Sequence[int]], until_s: float,
            note: str | None, force: bool = False) -> FleetResult[ReserveAnswer]:
    """Reserve `targets`; each host is told the GPUs we hold on the inventory's other hosts
    (the lab policy's GPUs per user count over the whole lab: remote/agent/lab.py)."""
    found, _ = list_claims(fleet)
    mine = {hc.host: len({g for c in hc.claims if c.live and c.uid == hc.me_uid
                          for g in c.gpus})
            for hc in found}

    def one(t: Transport) -> ReserveAnswer:  # held there, and asked of there by this command
        elsewhere = sum(n for h, n in mine.items() if h != t.host.name) + sum(
            len(g) for h, g in targets.items() if h != t.host.name)
        return agentops.reserve(t, targets[t.host.name], until_s, note, force, elsewhere)

    return fleet.map(one, list(targets))


def release(fleet: Fleet, targets: Mapping[str, Sequence[int]]) -> FleetResult[ReleaseAnswer]:
    return fleet.map(lambda t: agentops.release(t, targets[t.host.name]), list(targets))


def read_usage(fleet: Fleet, since_s: float, by: By, until_s: float) -> Usage:
    """The lab's ledger since `since_s`, every host of the inventory asked once (op `usage`),
    in parallel; a host that does not answer is named in the result, its hours left out."""
    found = fleet.map(lambda t: agentops.usage(t, since_s))
    return summarize(found.succeeded, {h: str(e) for h, e in found.failed.items()},
                     [h.name for h in fleet.inventory.hosts], since_s, until_s, by)
