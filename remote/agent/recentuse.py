"""Each user's recent GPU use on this host, as the fair queue weighs it (docs/policy.md).

Part of the agent program (`__init__.py`): stdlib only, Python >= 3.8, Linux, no tfctl imports.

What the queue needs of the past is one number per user: GPU-hours, each hour counting half as
much per `half_life` gone since it ended (`decayed_hours`), so last week's sweep weighs less
than this morning's. `recent_use` gives them as a plain mapping (user → hours), the one seam
between the queue and what records use on this host.

The use is the host's GPU ledger's (ledger.py, `tfctl usage`): tfctl's runs and sessions
counted exactly by their watchers as they go (a run still running counts up to now), other
processes as tfctl's samplers saw them, every user's files read as claims are (the user is the
file's owner, links never followed, files bounded per owner). The ledger keys its seconds by
the hour of the wall clock: an hour later than now (a clock that jumped) counts nothing, and no
hour counts less than nothing.
"""

from __future__ import annotations

import time

from tfctl.remote.agent.ledger import LEDGER_HOUR, LEDGER_KEEP_S, ledger_read, ledger_rows

RECENT_HALF_LIVES = 10.0
"""How far back the use is read, in half-lives: older hours weigh under a thousandth."""


def decayed_hours(gpu_s: float, ended_s: float, now_s: float, half_life_s: float) -> float:
    """GPU-seconds used until `ended_s` as GPU-hours halved for each `half_life_s` since then;
    pure."""
    age = max(0.0, now_s - ended_s)
    return max(0.0, gpu_s) / 3600.0 * 0.5 ** (age / half_life_s)


def recent_use(half_life_s: float, now_s: float | None = None,
               folder: str | None = None) -> dict[str, float]:
    """User → decayed GPU-hours on this host, from the ledger (module doc); each hour of the
    ledger decays from its end (or now, for the hour under way)."""
    now_s = time.time() if now_s is None else now_s
    since_s = now_s - min(LEDGER_KEEP_S, RECENT_HALF_LIVES * half_life_s)
    records, _ = ledger_read(since_s, folder)
    out: dict[str, float] = {}
    for row in ledger_rows(records, since_s, now_s):
        ended_s = min(now_s, (row["hour"] + 1) * LEDGER_HOUR)
        out[row["user"]] = out.get(row["user"], 0.0) + decayed_hours(
            row["held_s"], ended_s, now_s, half_life_s)
    return out
