"""One look at the hosts a waiting job waits on: one `gpu_state` request per host, in parallel,
which also refreshes our ticket's `beat` there (a ticket not refreshed for a minute and a half
holds nobody back). Every caller — `up --when-free`, `tfctl run`, a sweep's waiter, `tfctl
queue` — reads the hosts through `look`; turn.py and points.py judge what it saw.
"""

from __future__ import annotations

from collections.abc import Sequence

from tfctl.remote.connect.fleet import Fleet
from tfctl.remote.connect.session import agentops
from tfctl.remote.lab.freegpus import HostFree, host_free
from tfctl.remote.lab.view import host_lab
from tfctl.remote.queue.tickets import tickets_of
from tfctl.remote.queue.turn import HostView


def look(fleet: Fleet, ticket_id: str | None, hosts: Sequence[str]) -> list[HostView]:
    """Each of `hosts` as it is now: its GPUs as placement sees them, every user's tickets, our
    uid, and our ticket `ticket_id` refreshed (None: only looking, `tfctl queue`); a host that
    does not answer, with why."""
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
        views.append(HostView(name, host_free(lab), tickets_of(name, answer), lab.claims.me_uid,
                              tuple(r.index for r in lab.rows if r.index is not None),
                              warnings=tuple(answer.ticket_warnings)))
    return views
