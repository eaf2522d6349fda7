"""`gpus: free`: which GPUs of a host nobody holds or reserved, and the inventory that takes them.

A host written `gpus: free` (every such GPU) or `gpus: {free: N}` (that many) has its GPUs chosen
when they are needed: at `up` (remote/engines/hosts.py), for `plan --now`, and by a job that
waits for them (`queue.py`). One `gpu_state` request per such host (remote/agent/tickets.py)
brings what `tfctl lab` reads (nvidia-smi's compute apps, who they are, the claims), and the
lab's own judgement (`view.host_lab`) says which GPU is free, reserved or held. A GPU is free for
us when nobody computes on it, no live run claims it, and no other user reserved it; our own
reservation is ours to use. The lowest indices are taken first.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from tfctl.inventory.model import FreeGpus, Inventory
from tfctl.remote.connect.fleet import Fleet
from tfctl.remote.connect.session import agentops
from tfctl.remote.errors import RemoteError
from tfctl.remote.lab.view import HostLab, LabRow, host_lab


@dataclass(frozen=True)
class HostFree:
    """One host's GPUs as the choice of free ones sees them."""

    host: str
    free: tuple[int, ...] = ()
    """Indices nobody holds or reserved (our own reservations count as free)."""
    taken: tuple[str, ...] = ()
    """`GPU 0: held by carol (pid 4242 python train.py)`, one per GPU that is not free."""
    taken_gpus: tuple[int, ...] = ()
    """The indices `taken` speaks of, in its order."""
    error: str | None = None
    """Why the GPUs could not be read (no nvidia-smi, unreachable), or None."""


class NoFreeGpus(RemoteError):
    """A `gpus: free` host has fewer free GPUs than it asks for: nothing was started."""

    def __init__(self, host: str, wanted: FreeGpus, found: HostFree) -> None:
        want = "a free GPU" if wanted.count is None else f"{wanted.count} free GPUs"
        have = ", ".join(map(str, found.free)) or "none"
        why = found.error or "; ".join(found.taken) or "it lists no GPUs"
        super().__init__(host, f"`gpus: free` wants {want}, free now: {have} ({why}); "
                         "`tfctl up --when-free` waits for them", kind="no_free_gpus")


# ---------------------------------------------------------------- pure

def free_for_me(row: LabRow, my_uid: int | None) -> bool:
    """Nobody computes on the GPU, no live run claims it, and no other user reserved it."""
    if row.state == "free":
        return True
    return row.state == "reserved" and row.reservation is not None \
        and row.reservation.uid == my_uid


def taken_words(row: LabRow) -> str:
    """Who keeps a GPU from us: `GPU 0: held by carol (pid 4242 sleep 300)`."""
    if row.holders:
        said = "; ".join(f"{who} ({what})" for who, what in (h.who_what() for h in row.holders))
        return f"GPU {row.index}: held by {said}"
    if row.reservation is not None:
        return f"GPU {row.index}: {row.reservation.words()}"
    return f"GPU {row.index}: {row.state}"


def host_free(lab: HostLab) -> HostFree:
    """A host's `host_lab` rows → which GPUs are free for us, and who holds the others."""
    errors = [r.error for r in lab.rows if r.state == "error"]
    if errors:
        return HostFree(lab.host, error=errors[0])
    me = lab.claims.me_uid
    free = tuple(r.index for r in lab.rows if r.index is not None and free_for_me(r, me))
    rows = [r for r in lab.rows if r.index is not None and not free_for_me(r, me)]
    return HostFree(lab.host, free, tuple(taken_words(r) for r in rows),
                    tuple(r.index for r in rows if r.index is not None))


def choose(wanted: FreeGpus, found: HostFree) -> tuple[int, ...] | None:
    """The GPUs to take (lowest first), or None when there are too few."""
    if found.error is not None:
        return None
    if wanted.count is None:
        return found.free or None
    return found.free[:wanted.count] if len(found.free) >= wanted.count else None


def with_gpus(inv: Inventory, chosen: Mapping[str, Sequence[int]]) -> Inventory:
    """`inv` with each of `chosen`'s hosts on the GPUs taken for it (no longer `free`)."""
    hosts = tuple(dataclasses.replace(h, gpus=tuple(chosen[h.name]), free_gpus=None)
                  if h.name in chosen else h for h in inv.hosts)
    return dataclasses.replace(inv, hosts=hosts)


def free_hosts(inv: Inventory, hosts: Sequence[str] | None = None) -> list[str]:
    """The hosts (of `hosts`) written `gpus: free`."""
    return [h.name for h in inv.hosts if h.free_gpus is not None
            and (hosts is None or h.name in hosts)]


# ---------------------------------------------------------------- I/O

def read_free(fleet: Fleet, hosts: Sequence[str]) -> dict[str, HostFree]:
    """Each of `hosts`' free GPUs, in parallel, one request each."""
    found = fleet.map(lambda t: host_free(host_lab(t.host.name, agentops.gpu_state(t))), hosts)
    out = dict(found.succeeded)
    out.update({h: HostFree(h, error=str(e)) for h, e in found.failed.items()})
    return out


def take_free_gpus(fleet: Fleet, inv: Inventory, say: Callable[[str], None] | None = None
               ) -> tuple[Inventory, dict[str, tuple[int, ...]]]:
    """`inv` with its `gpus: free` hosts on the GPUs free now, and those GPUs; NoFreeGpus for
    the first host without enough."""
    names = free_hosts(inv)
    if not names:
        return inv, {}
    found = read_free(fleet, names)
    chosen: dict[str, tuple[int, ...]] = {}
    for name in names:
        wanted = inv.host(name).free_gpus
        assert wanted is not None
        took = choose(wanted, found[name])
        if took is None:
            raise NoFreeGpus(name, wanted, found[name])
        chosen[name] = took
    if say is not None:
        say("free GPUs taken: " + "; ".join(f"{h}: {', '.join(map(str, g))}"
                                            for h, g in chosen.items()))
    return with_gpus(inv, chosen), chosen
