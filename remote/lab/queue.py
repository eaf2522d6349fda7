"""A job that waits for GPUs: its tickets on the hosts, whose turn it is, and the look that says so.

`tfctl up --when-free` leaves a ticket on every host whose GPUs the plan needs (agent op
`ticket_put`, remote/agent/tickets.py): the GPUs it wants there (indices; for a `gpus: free`
host, a count), stamped by that host's clock when queued. The tickets of every user sit in one
folder per host, so the line is the same for everyone: on each host, oldest first.

A waiting job may start when, on every host it needs:
- its own ticket is there, and no older ticket that still waits (its waiter looked within
  `stale_s`) wants any of the same GPUs (a count of free GPUs wants them all): first come,
  first served, with no overtaking by a younger job whose GPUs happen to be free; and
- the GPUs it wants are free for it (freegpus.py: nobody computes on them, no live run claims
  them, no other user reserved them; its own reservation is its to use), or, for a count, that
  many are.
The waiter then runs the normal `up`; its tickets go once `up` has started the run (whose claims
then hold the GPUs) or has failed. Pure judgement here (`judge_host`), one `gpu_state` request
per host for the look (`look`).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tfctl.inventory.model import Inventory
from tfctl.inventory.plan import Plan
from tfctl.remote.connect.fleet import Fleet
from tfctl.remote.connect.session import agentops
from tfctl.remote.connect.session.agentops import GpuState, TicketPutAnswer
from tfctl.remote.connect.transport import Transport
from tfctl.remote.lab.freegpus import HostFree, host_free
from tfctl.remote.lab.view import host_lab

STALE_S = 90.0
"""A ticket whose waiter has not looked for this long holds nobody back (agent's default)."""


@dataclass(frozen=True)
class Want:
    """What a job needs of one host: these GPU indices, or `count` free ones (0: at least one)."""

    gpus: tuple[int, ...] | None = None
    count: int | None = None

    def words(self) -> str:
        if self.gpus is not None:
            return f"GPU{'s' if len(self.gpus) != 1 else ''} {', '.join(map(str, self.gpus))}"
        return "any free GPU" if not self.count else \
            f"{self.count} free GPU{'s' if self.count != 1 else ''}"

    def to_json(self) -> dict[str, Any]:
        return {"gpus": None if self.gpus is None else list(self.gpus), "count": self.count}


@dataclass(frozen=True)
class Ticket:
    """A waiting job's ticket on a host, as the host's agent read it (owner from the file)."""

    host: str
    id: str
    user: str
    uid: int
    want: Want
    queued_s: float
    """When it was queued, by the host's clock."""
    beat_s: float
    """When its waiter last looked, by the host's clock."""
    state: str
    """`waiting`, or `stale` (its waiter has not looked for a while: gone, or asleep)."""
    job: str | None = None
    client: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"host": self.host, "id": self.id, "user": self.user, "job": self.job,
                "wants": self.want.to_json(), "wants_words": self.want.words(),
                "queued": self.queued_s, "beat": self.beat_s, "state": self.state,
                "client": self.client}


@dataclass(frozen=True)
class HostTurn:
    """Whether a waiting job may start as far as one host goes, and why not."""

    host: str
    ready: bool
    why: str
    """What it waits for there (`GPU 0: held by carol (pid 42 sleep 300)`), or `free`."""
    ahead: tuple[Ticket, ...] = ()
    """Older tickets still waiting for some of the same GPUs."""
    position: int | None = None
    """Its place among the tickets there that want its GPUs (1: first), None: no ticket."""


# ---------------------------------------------------------------- pure

def wants_of(plan: Plan) -> dict[str, Want]:
    """Per host whose tasks the plan puts on GPUs: the indices its masks name, or, on a
    `gpus: free` host, how many free ones it takes (0: any number, at least one)."""
    out: dict[str, Want] = {}
    for name in plan.hosts_used:
        host = plan.inventory.host(name)
        if host.free_gpus is not None:
            out[name] = Want(count=host.free_gpus.count or 0)
            continue
        gpus: list[int] = []
        for task in plan.on_host(name):
            for token in task.cuda_visible_devices.split(","):
                if token.strip().isdigit() and int(token) not in gpus:
                    gpus.append(int(token))
        if gpus:
            out[name] = Want(gpus=tuple(sorted(gpus)))
    return out


def ticket_of(host: str, raw: Mapping[str, Any]) -> Ticket:
    gpus = raw.get("gpus")
    return Ticket(host, str(raw["id"]), str(raw["user"]), int(raw["uid"]),
                  Want(None if gpus is None else tuple(int(g) for g in gpus), raw.get("count")),
                  float(raw["queued"]), float(raw["beat"]), str(raw["state"]), raw.get("job"),
                  raw.get("client"))


def overlaps(a: Want, b: Want) -> bool:
    """Whether two wants compete for a GPU (a count of free GPUs competes with everything)."""
    if a.gpus is None or b.gpus is None:
        return True
    return bool(set(a.gpus) & set(b.gpus))


def judge_host(host: str, ticket_id: str, my_uid: int | None, want: Want, free: HostFree,
               tickets: Sequence[Ticket]) -> HostTurn:
    """Whether the job of ticket `ticket_id` may start as far as `host` goes (module doc)."""
    mine = next((t for t in tickets if t.id == ticket_id and t.uid == my_uid), None)
    if mine is None:
        return HostTurn(host, False, "its ticket is not there")
    rivals = [t for t in tickets if t is mine or (t.state == "waiting" and overlaps(t.want, want))]
    rivals.sort(key=lambda t: (t.queued_s, t.user, t.id))
    position = rivals.index(mine) + 1
    ahead = tuple(rivals[:position - 1])
    if ahead:
        first = ahead[0]
        return HostTurn(host, False, f"{len(ahead)} job{'s' if len(ahead) > 1 else ''} queued "
                                     f"first ({first.user}'s {first.id}, for "
                                     f"{first.want.words()})", ahead, position)
    if free.error is not None:
        return HostTurn(host, False, free.error, position=position)
    if want.gpus is not None:
        blocked = [w for g, w in zip(free.taken_gpus, free.taken, strict=True)
                   if g in want.gpus]
        missing = [g for g in want.gpus if g not in free.free and g not in free.taken_gpus]
        if blocked or missing:
            said = blocked + [f"GPU {g}: not on this host" for g in missing]
            return HostTurn(host, False, "; ".join(said), position=position)
        return HostTurn(host, True, "free", position=position)
    needed = max(1, want.count or 0)
    if len(free.free) < needed:
        return HostTurn(host, False, f"{len(free.free)} free GPUs of {needed} wanted ("
                                     f"{'; '.join(free.taken) or 'none listed'})",
                        position=position)
    return HostTurn(host, True, "free", position=position)


# ---------------------------------------------------------------- I/O

@dataclass(frozen=True)
class Look:
    """One look at the hosts a job waits on."""

    turns: Mapping[str, HostTurn]
    tickets: Mapping[str, tuple[Ticket, ...]]
    warnings: tuple[str, ...] = ()
    me_uids: Mapping[str, int | None] = field(default_factory=dict)
    """Our uid on each host that answered (the login there)."""
    unreachable: Mapping[str, str] = field(default_factory=dict)

    @property
    def ready(self) -> bool:
        return bool(self.turns) and all(t.ready for t in self.turns.values())

    def why(self) -> str:
        """`h1: GPU 0: held by …; h2: 1 job queued first (…)`."""
        return "; ".join(f"{h}: {t.why}" for h, t in self.turns.items() if not t.ready)


def tickets_of(host: str, answer: GpuState) -> tuple[Ticket, ...]:
    return tuple(ticket_of(host, raw) for raw in answer.tickets)


def look(fleet: Fleet, ticket_id: str | None, wants: Mapping[str, Want],
         hosts: Sequence[str] | None = None, stale_s: float = STALE_S) -> Look:
    """Every host of `wants` (or `hosts`): one `gpu_state` request each, in parallel, our
    ticket's `beat` refreshed; whose turn it is on each (`judge_host`, when `ticket_id`)."""
    names = list(wants) if hosts is None else list(hosts)

    found = fleet.map(lambda t: agentops.gpu_state(t, beat=ticket_id, tickets=True), names)
    turns: dict[str, HostTurn] = {}
    tickets: dict[str, tuple[Ticket, ...]] = {}
    warnings: list[str] = []
    me: dict[str, int | None] = {}
    unreachable: dict[str, str] = {}
    for name in names:
        if name not in found.succeeded:
            error = unreachable[name] = str(found.failed.get(name, "no answer"))
            if ticket_id and name in wants:
                turns[name] = HostTurn(name, False, f"cannot look: {error}")
            continue
        answer = found.succeeded[name]
        tickets[name] = tickets_of(name, answer)
        me[name] = None if answer.me is None else answer.me.uid
        warnings += [f"{name}: {w}" for w in answer.ticket_warnings]
        if ticket_id and name in wants:
            lab = host_lab(name, answer)
            turns[name] = judge_host(name, ticket_id, lab.claims.me_uid, wants[name],
                                     host_free(lab), tickets[name])
    return Look(turns, tickets, tuple(warnings), me, unreachable)


def put(fleet: Fleet, ticket_id: str, job: str, wants: Mapping[str, Want],
        client: str | None) -> dict[str, Any]:
    """Leave (or refresh) our ticket on every host of `wants`; the fleet's answers."""
    def one(t: Transport) -> TicketPutAnswer:
        want = wants[t.host.name]
        return agentops.ticket_put(t, ticket_id, job, want.gpus, want.count, client)

    result = fleet.map(one, list(wants))
    return {"succeeded": dict(result.succeeded), "failed": dict(result.failed)}


def drop(fleet: Fleet, ticket_id: str, hosts: Sequence[str]) -> dict[str, Any]:
    """Remove our ticket from `hosts` (where it is; only its owner can)."""
    result = fleet.map(lambda t: agentops.ticket_drop(t, ticket_id), list(hosts))
    return {"succeeded": dict(result.succeeded), "failed": dict(result.failed)}


def new_ticket_id() -> str:
    """`q-20261125-181500-ab12`: sortable by when it was made, unique enough per user."""
    import secrets

    return time.strftime("q-%Y%m%d-%H%M%S-", time.gmtime()) + secrets.token_hex(2)


def inventory_hosts(inv: Inventory, wants: Mapping[str, Want]) -> list[str]:
    return [h.name for h in inv.hosts if h.name in wants]
