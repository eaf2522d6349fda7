"""A waiting job's tickets on the hosts: what they want, how the hosts' answers are read, and
leaving and removing them.

`tfctl up --when-free` and `tfctl run` leave a ticket on every host whose GPUs they wait for
(agent op `ticket_put`, remote/agent/tickets.py): the GPUs wanted there (indices; for a
`gpus: free` host or a one-off's points, a count), stamped by that host's clock when queued.
The tickets of every user sit in one folder per host, so the line is the same for everyone: on
each host, oldest first. Whose turn it is, is turn.py's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tfctl.inventory.plan import Plan
from tfctl.remote.connect.fleet import Fleet, FleetResult
from tfctl.remote.connect.session import agentops
from tfctl.remote.connect.session.agentops import GpuState, TicketDropAnswer, TicketPutAnswer
from tfctl.remote.connect.transport import Transport


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


def tickets_of(host: str, answer: GpuState) -> tuple[Ticket, ...]:
    return tuple(ticket_of(host, raw) for raw in answer.tickets)


def overlaps(a: Want, b: Want) -> bool:
    """Whether two wants compete for a GPU (a count of free GPUs competes with everything)."""
    if a.gpus is None or b.gpus is None:
        return True
    return bool(set(a.gpus) & set(b.gpus))


def put(fleet: Fleet, ticket_id: str, job: str, wants: Mapping[str, Want],
        client: str | None) -> FleetResult[TicketPutAnswer]:
    """Leave (or refresh) our ticket on every host of `wants`; the fleet's answers."""
    def one(t: Transport) -> TicketPutAnswer:
        want = wants[t.host.name]
        return agentops.ticket_put(t, ticket_id, job, want.gpus, want.count, client)

    return fleet.map(one, list(wants))


def drop(fleet: Fleet, ticket_id: str, hosts: Sequence[str]) -> FleetResult[TicketDropAnswer]:
    """Remove our ticket from `hosts` (where it is; only its owner can)."""
    return fleet.map(lambda t: agentops.ticket_drop(t, ticket_id), list(hosts))


def put_count(fleet: Fleet, ticket_id: str, job: str, gpus_each: int, hosts: Sequence[str],
              client: str | None) -> dict[str, str]:
    """Our ticket for `gpus_each` free GPUs on each of `hosts` (a one-off's, a sweep's);
    host → why it could not be left."""
    left = put(fleet, ticket_id, job, {h: Want(count=gpus_each) for h in hosts}, client)
    return {h: str(e) for h, e in left.failed.items()}
