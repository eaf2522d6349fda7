"""Queue tickets: jobs that wait for GPUs of this host, in a folder every user reads.

Part of the agent program (`__init__.py`): stdlib only, Python >= 3.8, Linux, no tfctl imports.
Its operations are in the table of `optable.py`.

`tfctl up --when-free` leaves a ticket on each host whose GPUs the job needs: who waits (the
file's owner), for which GPUs (indices, or a count of free ones), and since when (this host's
clock, so that every user's tickets on a host are ordered by one clock). The client that waits
(remote/queue/look.py) refreshes its tickets' `beat` at every look; a ticket not refreshed for
`stale_s` is stale: its waiter is gone (killed, its laptop asleep), and it holds nobody back.

The tickets live in `queue/` inside the claims folder (claims.py), with the same rules: mode
1777 (only a file's owner removes it), named `<user>.ticket.<id>.json`, and read as other users'
data: never through a symbolic link (O_NOFOLLOW), the owner from the file (never its content),
a file named after another user, too big, or not a ticket skipped with one warning.

`gpu_state` answers in one request what both `up` on `gpus: free` hosts and a waiting job
need of a host: nvidia-smi's GPUs and compute apps, who those processes are, the claims, and
(asked for) the tickets, refreshing the asker's own.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from typing import Any

from tfctl.remote.agent.claims import claims_dir, ensure_folder, read_folder
from tfctl.remote.agent.lab import gpu_state_now
from tfctl.remote.agent.proc import user_name
from tfctl.remote.agent.vocab import (
    GpuState,
    GpuStateRequest,
    TicketDropAnswer,
    TicketPutAnswer,
    TicketRequest,
)
from tfctl.remote.agent.wire import AgentError

TICKET_FORMAT = "tfctl-ticket/1"
TICKET_MAX_BYTES = 16 * 1024
TICKET_MAX_PER_OWNER = 64
"""Tickets of one owner read in one look (one per job a user queues on the host)."""
TICKET_STALE_S = 90.0
"""A ticket whose waiter has not looked for this long is stale (the waiter looks every 5-30 s)."""


def tickets_dir() -> str:
    return os.path.join(claims_dir(), "queue")


def ticket_file_name(user: str, ident: str) -> str:
    safe = "".join(c if c.isalnum() or c in "_-" else "_" for c in ident)[:80]
    return f"{user}.ticket.{safe}.json"


def parse_ticket(raw: Any) -> dict[str, Any]:
    """The checked fields of a ticket's JSON (ValueError for anything else); pure."""
    if not isinstance(raw, dict) or raw.get("format") != TICKET_FORMAT:
        raise ValueError(f"not a {TICKET_FORMAT} record")
    ident = raw.get("id")
    if not isinstance(ident, str) or not 0 < len(ident) <= 80:
        raise ValueError("no ticket id")
    gpus = raw.get("gpus")
    if gpus is not None and not (isinstance(gpus, list) and len(gpus) <= 64 and all(
            isinstance(g, int) and not isinstance(g, bool) and g >= 0 for g in gpus)):
        raise ValueError("gpus is not a list of GPU indices")
    count = raw.get("count")
    if count is not None and not (isinstance(count, int) and 0 <= count <= 64):
        raise ValueError("count is not a GPU count")
    if gpus is None and count is None:
        raise ValueError("wants no GPUs")
    times = [raw.get("queued"), raw.get("beat")]
    if not all(isinstance(t, (int, float)) and not isinstance(t, bool) for t in times):
        raise ValueError("no time stamps")
    job = raw.get("job")
    return {"id": ident, "job": None if job is None else str(job)[:120], "gpus": gpus,
            "count": count, "queued": float(raw["queued"]), "beat": float(raw["beat"]),
            "client": None if raw.get("client") is None else str(raw["client"])[:120]}


def read_tickets(now_s: float, stale_s: float = TICKET_STALE_S
                 ) -> tuple[list[dict[str, Any]], list[str]]:
    """Every ticket with its `state` (`waiting` or `stale`), oldest first; one warning per
    owner whose files were skipped, read as the claims are (`claims.read_folder`: each
    owner's files bounded on their own)."""
    tickets, warnings = read_folder(tickets_dir(), "queue folder", ("ticket",),
                                    TICKET_MAX_BYTES, lambda raw, _kind: parse_ticket(raw),
                                    per_owner=TICKET_MAX_PER_OWNER)
    for ticket in tickets:
        ticket["state"] = "waiting" if now_s - ticket["beat"] <= stale_s else "stale"
    tickets.sort(key=lambda t: (t["queued"], t["user"], t["id"]))
    return tickets, warnings


def _ticket_write(record: dict[str, Any]) -> None:
    folder = tickets_dir()
    for needed in (claims_dir(), folder):
        problem = ensure_folder(needed)
        if problem:
            raise AgentError("queue", problem)
    me = user_name(os.getuid()) or str(os.getuid())
    body = dict(record, format=TICKET_FORMAT)
    parse_ticket(json.loads(json.dumps(body)))
    path = os.path.join(folder, ticket_file_name(me, record["id"]))
    tmp = os.path.join(folder, f".{me}.{os.getpid()}.ticket.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                     0o644)
        with os.fdopen(fd, "w") as f:
            json.dump(body, f, sort_keys=True)
        os.replace(tmp, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise AgentError("queue", f"cannot write the queue ticket {path}: "
                         f"{exc.strerror or exc}") from exc


def _own_ticket(ident: str, tickets: list[dict[str, Any]]) -> dict[str, Any] | None:
    return next((t for t in tickets if t["uid"] == os.getuid() and t["id"] == ident), None)


def op_ticket_put(req: TicketRequest) -> TicketPutAnswer:
    """Queue (or refresh) our ticket `ticket_id` for `gpus` or `count` free GPUs of this host; a
    refreshed ticket keeps its place (its `queued` stamp)."""
    ident = str(req.ticket_id)
    now_s = time.time()
    tickets, _ = read_tickets(now_s)
    mine = _own_ticket(ident, tickets)
    queued = float(mine["queued"]) if mine else now_s
    record = {"id": ident, "job": req.job, "gpus": None if req.gpus is None else list(req.gpus),
              "count": req.count, "client": req.client, "queued": queued, "beat": now_s}
    try:
        _ticket_write(record)
    except ValueError as exc:
        raise AgentError("bad_request", f"not a ticket: {exc}") from exc
    return TicketPutAnswer(queued, now_s)


def op_ticket_drop(req: TicketRequest) -> TicketDropAnswer:
    """Remove our ticket `ticket_id` (only the owner's uid may: checked on the file)."""
    ident = str(req.ticket_id)
    me = user_name(os.getuid()) or str(os.getuid())
    path = os.path.join(tickets_dir(), ticket_file_name(me, ident))
    try:
        st = os.lstat(path)
        if st.st_uid != os.getuid():
            return TicketDropAnswer(False)
        os.unlink(path)
    except OSError:
        return TicketDropAnswer(False)
    return TicketDropAnswer(True)


def op_gpu_state(req: GpuStateRequest) -> GpuState:
    """GPUs, compute apps, their processes and the claims (as `lab` has them, without the idle
    sampler); with `tickets`, the queue too, after refreshing our ticket `beat` if named."""
    state = gpu_state_now()
    if req.beat:
        now_s = time.time()
        found, _ = read_tickets(now_s)
        mine = _own_ticket(str(req.beat), found)
        if mine is not None:
            _ticket_write(dict({k: mine[k] for k in ("id", "job", "gpus", "count", "client",
                                                     "queued")}, beat=now_s))
    if req.tickets:
        stale_s = float(req.stale_s or TICKET_STALE_S)
        queue, warnings = read_tickets(time.time(), stale_s)
        state = GpuState.from_wire(dict(state.to_wire(), tickets=queue,
                                        ticket_warnings=warnings))
    return state
