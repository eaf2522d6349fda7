"""One look at the hosts a waiting job waits on: one `gpu_state` request per host, in parallel,
which also refreshes our ticket's `beat` there (a ticket not refreshed for a minute and a half
holds nobody back). Every caller — `up --when-free`, `tfctl run`, a sweep's waiter, `tfctl
queue` — reads the hosts through `look`; turn.py and points.py judge what it saw.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from tfctl.remote.connect.fleet import Fleet
from tfctl.remote.connect.session import agentops
from tfctl.remote.connect.session.agentops import ClaimsAnswer
from tfctl.remote.lab.freegpus import HostFree, host_free
from tfctl.remote.lab.view import host_lab
from tfctl.remote.queue.tickets import tickets_of
from tfctl.remote.queue.turn import HostView


def look(fleet: Fleet, ticket_id: str | None, hosts: Sequence[str],
         whole: Fleet | None = None) -> list[HostView]:
    """Each of `hosts` as it is now: its GPUs as placement sees them, every user's tickets, our
    uid, and our ticket `ticket_id` refreshed (None: only looking, `tfctl queue`); a host that
    does not answer, with why. Each view's `held` counts every user's GPUs over all of the
    inventory's hosts where a host's policy limits GPUs per user (their claims are read too,
    through `whole` where given: a fleet of the whole inventory, when `fleet` has only some of
    its hosts)."""
    names = list(hosts)
    found = fleet.map(lambda t: agentops.gpu_state(t, beat=ticket_id, tickets=True), names)
    views = []
    for name in names:
        answer = found.succeeded.get(name)
        if answer is None:
            why = str(found.failed.get(name, "no answer"))
            views.append(HostView(name, HostFree(name, error=f"cannot look: {why}"),
                                  unreachable=why))
            continue
        lab = host_lab(name, answer)
        rule, limits = answer.queue_rule or {}, answer.limits or {}
        views.append(HostView(name, host_free(lab), tickets_of(name, answer), lab.claims.me_uid,
                              tuple(r.index for r in lab.rows if r.index is not None),
                              warnings=tuple(answer.ticket_warnings),
                              order=str(rule.get("order") or "fifo"),
                              use=dict(answer.recent_use or {}),
                              gpus_per_user=limits.get("gpus_per_user"),
                              exceed_when_nobody_waits=bool(
                                  limits.get("exceed_when_nobody_waits", True))))
    answers: list[ClaimsAnswer] = list(found.succeeded.values())
    if any(v.gpus_per_user is not None for v in views):  # the limit holds over every host
        every = whole or fleet
        others = [h.name for h in every.inventory.hosts if h.name not in names]
        if others:
            answers += list(every.map(agentops.claims, others).succeeded.values())
    held = held_by_user(answers)
    return [dataclasses.replace(v, held=held) for v in views]


def held_by_user(answers: Sequence[ClaimsAnswer]) -> dict[str, int]:
    """User → GPUs they hold over these hosts' answers: each live run claim's and unexpired
    reservation's GPUs, once per host; pure."""
    held: dict[str, int] = {}
    for answer in answers:
        per_user: dict[str, set[str]] = {}
        for claim in answer.claims:
            if claim.get("state") == "live":
                per_user.setdefault(str(claim.get("user")), set()).update(
                    str(g) for g in claim.get("gpus") or ())
        for user, gpus in per_user.items():
            held[user] = held.get(user, 0) + len(gpus)
    return held
