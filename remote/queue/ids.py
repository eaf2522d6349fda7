"""The ids of what waits and starts in the lab's queue, made and read here only.

- `q-20261125-181500-ab12`: a job queued with `up --when-free`; its ticket on each host and its
  record on this machine (`~/.cache/tfctl/queue/q-….json`) share the id.
- `s-20261125-181500-ab12`: a sweep (`tfctl run --each`, `run --when-free`): its record here,
  and the one ticket per host its waiting points hold; `down --run s-…` stops it.
- `r-20261125-181500-ab12`: the ticket of a `run` that is starting now (held only for the
  seconds its start takes); it shares its time and suffix with the sweep it may become.

Each is sortable by when it was made (UTC) and unique enough per user (two random bytes).
"""

from __future__ import annotations

import secrets
import time
from typing import Literal

QUEUED = "q-"
"""A job that waits for its GPUs (`up --when-free`)."""
SWEEP = "s-"
"""A sweep: its points wait under one ticket."""
STARTING = "r-"
"""A `run` starting now: its ticket goes within seconds."""

RECORDED = (QUEUED, SWEEP)
"""The prefixes of the records this machine keeps of what it queued."""

Kind = Literal["up", "sweep"]
"""What a waiting job is: an `up --when-free` job, or a sweep's points."""


def _new(prefix: str) -> str:
    return time.strftime(f"{prefix}%Y%m%d-%H%M%S-", time.gmtime()) + secrets.token_hex(2)


def new_queued_id() -> str:
    """`q-20261125-181500-ab12`, for a job queued with `up --when-free`."""
    return _new(QUEUED)


def new_sweep_id() -> str:
    """`s-20261125-181500-ab12`, for a sweep."""
    return _new(SWEEP)


def starting_id(sweep_id: str | None = None) -> str:
    """The ticket of a `run` starting now: `sweep_id`'s time and suffix under `r-` (so the two
    tickets of one `run` read as one), or a new one."""
    return STARTING + (sweep_id or new_sweep_id())[len(SWEEP):]


def new_session_key() -> str:
    """`20261125-181500-ab12`: a session's own name on its host (its token file's), a time and
    a suffix as every id here has, with no prefix: it names no record and no ticket."""
    return _new("")


def is_sweep(record_id: str) -> bool:
    """Whether `record_id` names a sweep (`down --run s-…` stops the sweep, not a run)."""
    return record_id.startswith(SWEEP)


def is_starting(ticket_id: str) -> bool:
    """Whether a ticket is a `run`'s that is starting now (gone in seconds)."""
    return ticket_id.startswith(STARTING)


def kind_of(record_id: str) -> Kind:
    """The kind of waiting job an id names: a sweep's `s-…`, else an `up --when-free` job."""
    return "sweep" if is_sweep(record_id) else "up"


def is_record_id(text: str) -> bool:
    """Whether `text` can name a record of this machine's queue (letters, digits and dashes
    only, so it never leaves the queue's folder)."""
    return bool(text) and text.replace("-", "").isalnum()
