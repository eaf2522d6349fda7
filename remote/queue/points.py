"""Where a one-off run's points go now: sets of N free GPUs anywhere in the lab, first come,
first served with the queue (`tfctl run`, a sweep's waiter).

Before it looks, a `tfctl run` leaves one ticket on every host a point may go to (a count of N
free GPUs: tickets.py's tickets, every user's in one line per host, ordered by each host's
clock), then judges each host from one look at it (look.py; what each host gives our ticket is
turn.py's `usable`):

- an older waiting ticket for a count of free GPUs (another user's one-off or sweep, a
  `gpus: free` job queued with `up --when-free`) goes first: the host gives none of our points
  a GPU until that ticket is gone, since which GPUs its owner will take is not known. A `run`
  that is starting holds its ticket only for the seconds its start takes (its run's claim then
  holds its GPUs); one that waits holds it until its points have started;
- the GPUs an older ticket wants by index are left to it;
- of the rest, those free for us (freegpus.py: nobody computes on them, no live run claims them,
  no other user reserved them) go N at a time, lowest first, to our points in order, host by
  host in the inventory's order.

So two users starting at once never take the same GPU: each left its ticket before it looked,
and of two looks the later one sees the other's ticket; the older ticket's owner goes first and
the younger waits until that ticket is gone. The points of our own ticket are all placed in the
one judgement that sees them. Pure. (A `run` starting now holds an `r-…` ticket, a waiting
one-off or sweep an `s-…` one: ids.py.)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from tfctl.remote.queue.ids import is_starting
from tfctl.remote.queue.tickets import Ticket
from tfctl.remote.queue.turn import Hold, HostView, Reason, over_limit, usable


@dataclass(frozen=True)
class Placement:
    """What one judgement gives our points: (host, GPUs) for each placed point, in order, and
    why each host gave no more."""

    taken: tuple[tuple[str, tuple[int, ...]], ...] = ()
    why: Mapping[str, str] = field(default_factory=dict)
    """Host → what keeps (more of) our points from it: `GPU 0: held by carol (…)`, an older
    ticket, an error."""
    ahead: tuple[Ticket, ...] = ()
    """Older tickets for a count of free GPUs that hold our points back somewhere."""
    holds: Mapping[str, Reason] = field(default_factory=dict)
    """Host → what held it back, as a value, where `why` names a reason."""

    def words(self) -> str:
        """`h1: GPU 0: held by …; h2: 1 job queued first (…)`."""
        return "; ".join(f"{h}: {w}" for h, w in self.why.items())

    @property
    def only_starting_ahead(self) -> bool:
        """Whether every older ticket in the way is a `run` starting now (gone in seconds)."""
        return bool(self.ahead) and all(is_starting(t.id) for t in self.ahead)

    def held_by(self, hold: Hold) -> list[str]:
        """The hosts where that kind of thing held our points back."""
        return [h for h, r in self.holds.items() if r.hold is hold]


def place_points(gpus_each: int, count: int, ticket_id: str, views: Sequence[HostView],
                 allowed: Mapping[str, Sequence[int] | None]) -> Placement:
    """Up to `count` points of `gpus_each` GPUs each, placed now on `views`' hosts in their order
    (`allowed`: host → the GPUs the inventory lets tfctl use there, None: any it lists)."""
    taken: list[tuple[str, tuple[int, ...]]] = []
    why: dict[str, str] = {}
    holds: dict[str, Reason] = {}
    ahead: list[Ticket] = []
    for view in views:
        free, reason = usable(view, ticket_id, allowed.get(view.host))
        if reason is not None and reason.hold is Hold.QUEUED_FIRST:
            ahead += reason.ahead
        mine = next((t for t in view.tickets if t.id == ticket_id and t.uid == view.me_uid),
                    None)
        while len(taken) < count and len(free) >= gpus_each:
            limited = None if mine is None else over_limit(view, mine, gpus_each * len(taken))
            if limited is not None:  # the policy's GPUs per user, counting what we just took
                reason = limited
                break
            taken.append((view.host, tuple(free[:gpus_each])))
            free = free[gpus_each:]
        if len(taken) < count:
            not_more = "no free GPU" if reason is None else reason.words("our")
            left = f"{len(free)} free GPU{'s' if len(free) != 1 else ''} left" if free else ""
            why[view.host] = "; ".join(w for w in (not_more, left) if w)
            if reason is not None:
                holds[view.host] = reason
    return Placement(tuple(taken), why, tuple(ahead), holds)
