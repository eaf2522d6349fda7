"""Whether a waiting job may start on a host now, and if not, why — as values. Pure.

One look at a host (look.py) gives a `HostView`: its GPUs as placement sees them (freegpus.py:
free for us means nobody computes on them, no live run claims them, no other user reserved
them; our own reservation is ours to use), every user's tickets, our uid there. From it:

- `host_turn`: a job that wants these GPUs (or a count of free ones) of the host, `up
  --when-free`'s. It may start there when its own ticket is there, no older ticket that still
  waits (its waiter looked within the agent's stale time) wants any of the same GPUs (a count
  of free GPUs wants them all): first come, first served, with no overtaking by a younger job
  whose GPUs happen to be free; and the GPUs it wants are free for it, or, for a count, that
  many are.
- `usable`: the GPUs of the host a one-off's or sweep's ticket (a count per point) may take now
  (points.py places the points on them): none while an older ticket for a count waits (which
  GPUs its owner will take is not known), and never those an older ticket wants by index.

What holds a job back is a `Reason`: what kind of thing (its ticket missing, jobs queued first,
the GPUs unreadable, taken or too few) with what it names; `words()` is its sentence for the
record, the log and `tfctl queue`. A waiter acts on the kind (a ticket the host lost is left
again), never on the sentence.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum

from tfctl.remote.agent.policy import limit_words
from tfctl.remote.lab.freegpus import HostFree
from tfctl.remote.queue.tickets import Ticket, Want, overlaps


@dataclass(frozen=True)
class HostView:
    """One host as a look saw it: its GPUs free for us, every user's tickets, our uid."""

    host: str
    free: HostFree
    tickets: tuple[Ticket, ...] = ()
    me_uid: int | None = None
    listed: tuple[int, ...] = ()
    """The indices of the GPUs nvidia-smi lists there."""
    unreachable: str | None = None
    """Why the host gave no answer (then `free.error` says `cannot look: …`), or None."""
    warnings: tuple[str, ...] = ()
    """What its agent said of tickets it could not read."""
    order: str = "fifo"
    """The host's lab policy's queue order: `fifo` (first come, first served) or `fair`."""
    use: Mapping[str, float] = field(default_factory=dict)
    """User → recent GPU-hours there, decayed (a fair queue's weights; see `UsageByUser`)."""
    gpus_per_user: int | None = None
    """The host's lab policy's `limits.gpus_per_user`, or None."""
    exceed_when_nobody_waits: bool = True
    """Whether a user at the limit may still take GPUs no other user's job waits for."""
    held: Mapping[str, int] = field(default_factory=dict)
    """User → GPUs they hold (live runs, reservations) over every host looked at: what the
    limit counts."""


UsageByUser = Mapping[str, float]
"""Each user's recent GPU use on a host, in GPU-hours decayed with the queue's half-life: what
a fair queue weighs (the host's agent computes it, agent/recentuse.py `recent_use`)."""


class Hold(Enum):
    """What kind of thing keeps a waiting job from a host."""

    NO_TICKET = "no_ticket"
    """Our ticket is not on the host (its /tmp was emptied, or it could not be left)."""
    QUEUED_FIRST = "queued_first"
    """Older tickets want the same GPUs (`ahead`)."""
    CANNOT_READ = "cannot_read"
    """The host's GPUs could not be read (`error`): unreachable, no nvidia-smi."""
    GPUS_TAKEN = "gpus_taken"
    """GPUs it wants are held or reserved by others (`taken`), kept for older tickets
    (`kept`), or not on the host (`missing`)."""
    TOO_FEW = "too_few"
    """Fewer GPUs are free (`free_count`) than it wants (`wanted`)."""
    OVER_LIMIT = "over_limit"
    """Its user holds `held` GPUs, and `wanted` more would pass the policy's `limit` of GPUs
    per user while another user's job waits (`ahead` names it)."""


@dataclass(frozen=True)
class Reason:
    """Why a waiting job may not start on a host now."""

    hold: Hold
    ahead: tuple[Ticket, ...] = ()
    error: str = ""
    taken: tuple[str, ...] = ()
    """`GPU 0: held by carol (pid 42 sleep 300)`, one per GPU that is not free."""
    kept: tuple[tuple[int, Ticket], ...] = ()
    """(GPU, the older ticket that wants it by index)."""
    missing: tuple[int, ...] = ()
    free_count: int = 0
    wanted: int = 0
    limit: int = 0
    held: int = 0
    user: str = ""

    def words(self, whose: str = "its") -> str:
        """The sentence: `1 job queued first (bob's q-…, for GPU 0)`, `GPU 0: held by …`."""
        if self.hold is Hold.NO_TICKET:
            return f"{whose} ticket is not there"
        if self.hold is Hold.QUEUED_FIRST:
            first, n = self.ahead[0], len(self.ahead)
            return (f"{n} job{'s' if n > 1 else ''} queued first ({first.user}'s {first.id}, "
                    f"for {first.want.words()})")
        if self.hold is Hold.CANNOT_READ:
            return self.error
        if self.hold is Hold.OVER_LIMIT:
            other = self.ahead[0] if self.ahead else None
            return limit_words(self.limit, self.user, self.held, self.wanted,
                               f"{other.user}'s {other.id}" if other else None)
        if self.hold is Hold.TOO_FEW:
            return (f"{self.free_count} free GPUs of {self.wanted} wanted ("
                    f"{'; '.join(self.taken) or 'none listed'})")
        return "; ".join([*self.taken, *(f"GPU {g}: wanted by {t.user}'s {t.id}, queued first"
                                         for g, t in self.kept),
                          *(f"GPU {g}: not on this host" for g in self.missing)])


@dataclass(frozen=True)
class HostTurn:
    """Whether a waiting job may start as far as one host goes, and why not."""

    host: str
    reason: Reason | None = None
    """What holds it back there; None: its turn, its GPUs free."""
    position: int | None = None
    """Its place among the tickets there that want its GPUs (1: first), None: no ticket."""

    @property
    def ready(self) -> bool:
        return self.reason is None

    @property
    def why(self) -> str:
        """What it waits for there (`GPU 0: held by carol (pid 42 sleep 300)`), or `free`."""
        return "free" if self.reason is None else self.reason.words()

    @property
    def ahead(self) -> tuple[Ticket, ...]:
        """Older tickets still waiting for some of the same GPUs."""
        return () if self.reason is None else self.reason.ahead


@dataclass(frozen=True)
class Turns:
    """A waiting job's turn on every host it waits on, from one look."""

    turns: Mapping[str, HostTurn] = field(default_factory=dict)

    @property
    def ready(self) -> bool:
        return bool(self.turns) and all(t.ready for t in self.turns.values())

    def why(self) -> str:
        """`h1: GPU 0: held by …; h2: 1 job queued first (…)`."""
        return "; ".join(f"{h}: {t.why}" for h, t in self.turns.items() if not t.ready)

    def held_by(self, hold: Hold) -> list[str]:
        """The hosts where that kind of thing holds the job back."""
        return [h for h, t in self.turns.items()
                if t.reason is not None and t.reason.hold is hold]


def queue_key(t: Ticket, order: str = "fifo", use: UsageByUser | None = None
              ) -> tuple[float, float, str, str]:
    """Where a ticket stands in a host's line: by arrival (`fifo`), or (`fair`) by its user's
    recent GPU-hours, the least first, arrival breaking ties; pure."""
    share = round((use or {}).get(t.user, 0.0), 6) if order == "fair" else 0.0
    return (share, t.queued_s, t.user, t.id)


def _mine(view: HostView, ticket_id: str) -> Ticket | None:
    return next((t for t in view.tickets if t.id == ticket_id and t.uid == view.me_uid), None)


def _key_of(view: HostView) -> Callable[[Ticket], tuple[float, float, str, str]]:
    return lambda t: queue_key(t, view.order, view.use)


def line_of(view: HostView) -> list[tuple[Ticket, str]]:
    """The host's tickets in the order the queue takes them, each with why it stands there
    (`tfctl queue`): arrival under `fifo`; under `fair`, its user's recent GPU-hours (their
    share of the recent use there); pure."""
    ordered = sorted(view.tickets, key=_key_of(view))
    if view.order != "fair":
        return [(t, "first come, first served") for t in ordered]
    total = sum(view.use.values())
    out = []
    for t in ordered:
        hours = view.use.get(t.user, 0.0)
        share = f", {100 * hours / total:.0f} % of the recent use here" if total > 0 else ""
        out.append((t, f"fair: {t.user} used {hours:.2f} GPU-h recently{share}"))
    return out


def wanted_count(want: Want) -> int:
    """How many GPUs a want takes (a count of `any free` takes at least one)."""
    return len(want.gpus) if want.gpus is not None else max(1, want.count or 0)


def over_limit(view: HostView, ticket: Ticket, also: int = 0) -> Reason | None:
    """Why `ticket` may not take its GPUs under the policy's per-user limit (its user's GPUs
    held over every host looked at, plus `also` it is taking in the same placement, plus those
    it wants, pass the limit, and another user's job waits there, or the policy lets nobody
    pass it), or None; pure."""
    limit = view.gpus_per_user
    if limit is None:
        return None
    held, wanted = view.held.get(ticket.user, 0) + also, wanted_count(ticket.want)
    if held + wanted <= limit:
        return None
    others = tuple(t for t in view.tickets if t.state == "waiting" and t.user != ticket.user)
    if not others and view.exceed_when_nobody_waits:
        return None
    return Reason(Hold.OVER_LIMIT, ahead=others[:1], limit=limit, held=held, wanted=wanted,
                  user=ticket.user)


def _stands_aside(view: HostView, t: Ticket) -> bool:
    """A waiting ticket that holds nobody back: its user is over the limit."""
    return over_limit(view, t) is not None


def host_turn(view: HostView, ticket_id: str, want: Want) -> HostTurn:
    """Whether the job of ticket `ticket_id`, wanting `want` of the host, may start as far as
    `view`'s host goes (module doc)."""
    host, free = view.host, view.free
    if view.unreachable is not None:
        return HostTurn(host, Reason(Hold.CANNOT_READ, error=f"cannot look: {view.unreachable}"))
    mine = _mine(view, ticket_id)
    if mine is None:
        return HostTurn(host, Reason(Hold.NO_TICKET))
    rivals = [t for t in view.tickets
              if t is mine or (t.state == "waiting" and overlaps(t.want, want))]
    rivals.sort(key=_key_of(view))
    position = rivals.index(mine) + 1
    limited = over_limit(view, mine)
    if limited is not None:
        return HostTurn(host, limited, position)
    ahead = tuple(t for t in rivals[:position - 1] if not _stands_aside(view, t))
    if ahead:
        return HostTurn(host, Reason(Hold.QUEUED_FIRST, ahead=ahead), position)
    if free.error is not None:
        return HostTurn(host, Reason(Hold.CANNOT_READ, error=free.error), position)
    if want.gpus is not None:
        taken = tuple(w for g, w in zip(free.taken_gpus, free.taken, strict=True)
                      if g in want.gpus)
        missing = tuple(g for g in want.gpus if g not in free.free and g not in free.taken_gpus)
        if taken or missing:
            return HostTurn(host, Reason(Hold.GPUS_TAKEN, taken=taken, missing=missing),
                            position)
        return HostTurn(host, None, position)
    needed = max(1, want.count or 0)
    if len(free.free) < needed:
        return HostTurn(host, Reason(Hold.TOO_FEW, taken=free.taken,
                                     free_count=len(free.free), wanted=needed), position)
    return HostTurn(host, None, position)


def turns(views: Sequence[HostView], ticket_id: str, wants: Mapping[str, Want]) -> Turns:
    """`host_turn` on every host of `wants` that `views` show."""
    return Turns({v.host: host_turn(v, ticket_id, wants[v.host])
                  for v in views if v.host in wants})


def usable(view: HostView, ticket_id: str, allowed: Sequence[int] | None
           ) -> tuple[list[int], Reason | None]:
    """The GPUs of one host our count ticket may take now, lowest first (`allowed`: the GPUs
    the inventory lets tfctl use there, None: any it lists), and why not more (or None)."""
    if view.free.error is not None:
        return [], Reason(Hold.CANNOT_READ, error=view.free.error)
    mine = _mine(view, ticket_id)
    if mine is None:
        return [], Reason(Hold.NO_TICKET)
    limited = over_limit(view, mine)
    if limited is not None:
        return [], limited
    key = _key_of(view)
    older = [t for t in view.tickets if t is not mine and t.state == "waiting"
             and key(t) < key(mine) and not _stands_aside(view, t)]
    counting = tuple(t for t in older if t.want.gpus is None)
    if counting:
        return [], Reason(Hold.QUEUED_FIRST, ahead=counting)
    kept = {g for t in older for g in (t.want.gpus or ())}
    free = [g for g in view.free.free if g not in kept and (allowed is None or g in allowed)]
    taken = tuple(w for g, w in zip(view.free.taken_gpus, view.free.taken, strict=True)
                  if allowed is None or g in allowed)
    wanted_first = tuple((g, t) for t in older for g in (t.want.gpus or ())
                         if g in view.free.free and (allowed is None or g in allowed))
    if not taken and not wanted_first:
        return sorted(free), None
    return sorted(free), Reason(Hold.GPUS_TAKEN, taken=taken, kept=wanted_first)
