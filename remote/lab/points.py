"""Where a one-off run's points go now: sets of N free GPUs anywhere in the lab, first come,
first served with the queue (`tfctl run`, a sweep's waiter).

Before it looks, a `tfctl run` leaves one ticket on every host a point may go to (a count of N
free GPUs: queue.py's tickets, every user's in one line per host, ordered by each host's clock),
then judges each host from one look at it (`gpu_state`):

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
one judgement that sees them. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from tfctl.remote.lab.freegpus import HostFree
from tfctl.remote.lab.queue import Ticket

STARTING = "r-"
"""The ticket id's prefix of a `run` that is starting now (it goes within seconds); a waiting
one-off's or sweep's ticket is `q-`, as `up --when-free`'s."""


@dataclass(frozen=True)
class HostView:
    """One host as a look saw it: its GPUs free for us, every user's tickets, our uid."""

    host: str
    free: HostFree
    tickets: tuple[Ticket, ...] = ()
    me_uid: int | None = None
    listed: tuple[int, ...] = ()
    """The indices of the GPUs nvidia-smi lists there."""


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

    def words(self) -> str:
        """`h1: GPU 0: held by …; h2: 1 job queued first (…)`."""
        return "; ".join(f"{h}: {w}" for h, w in self.why.items())

    @property
    def only_starting_ahead(self) -> bool:
        """Whether every older ticket in the way is a `run` starting now (gone in seconds)."""
        return bool(self.ahead) and all(t.id.startswith(STARTING) for t in self.ahead)


def _key(t: Ticket) -> tuple[float, str, str]:
    return (t.queued_s, t.user, t.id)


def usable(view: HostView, ticket_id: str, allowed: Sequence[int] | None
           ) -> tuple[list[int], str | None, tuple[Ticket, ...]]:
    """The GPUs of one host our ticket may take now, lowest first; why not more (or None);
    the older count tickets that hold it back."""
    if view.free.error is not None:
        return [], view.free.error, ()
    mine = next((t for t in view.tickets if t.id == ticket_id and t.uid == view.me_uid), None)
    if mine is None:
        return [], "our ticket is not there", ()
    older = [t for t in view.tickets if t is not mine and t.state == "waiting"
             and _key(t) < _key(mine)]
    counting = tuple(t for t in older if t.want.gpus is None)
    if counting:
        first = counting[0]
        n = len(counting)
        return [], (f"{n} job{'s' if n > 1 else ''} queued first ({first.user}'s {first.id}, "
                    f"for {first.want.words()})"), counting
    kept = {g for t in older for g in (t.want.gpus or ())}
    free = [g for g in view.free.free if g not in kept
            and (allowed is None or g in allowed)]
    why = [w for g, w in zip(view.free.taken_gpus, view.free.taken, strict=True)
           if allowed is None or g in allowed]
    why += [f"GPU {g}: wanted by {t.user}'s {t.id}, queued first" for t in older
            for g in (t.want.gpus or ()) if g in view.free.free
            and (allowed is None or g in allowed)]
    return sorted(free), "; ".join(why) or None, ()


def place_points(gpus_each: int, count: int, ticket_id: str, views: Sequence[HostView],
                 allowed: Mapping[str, Sequence[int] | None]) -> Placement:
    """Up to `count` points of `gpus_each` GPUs each, placed now on `views`' hosts in their order
    (`allowed`: host → the GPUs the inventory lets tfctl use there, None: any it lists)."""
    taken: list[tuple[str, tuple[int, ...]]] = []
    why: dict[str, str] = {}
    ahead: list[Ticket] = []
    for view in views:
        free, not_more, holding = usable(view, ticket_id, allowed.get(view.host))
        ahead += holding
        while len(taken) < count and len(free) >= gpus_each:
            taken.append((view.host, tuple(free[:gpus_each])))
            free = free[gpus_each:]
        if len(taken) < count:
            left = f"{len(free)} free GPU{'s' if len(free) != 1 else ''} left" if free else ""
            why[view.host] = "; ".join(w for w in (not_more or "no free GPU", left) if w)
    return Placement(tuple(taken), why, tuple(ahead))
