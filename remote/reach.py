"""What is known about reaching a host, and how old it is, in words and as JSON. Pure.

One sentence for a host that does not answer, the same in the dashboard, `tfctl status` and
`tfctl gpus`: "unreachable since 21:16:24 (no answer for 35 s)". "Since" is when tfctl began
waiting for an answer that never came (the first failed poll, or the read this command made);
"no answer for" counts from then to now, so the reader sees how old everything else shown for
that host is. The --json forms carry the same facts: `"reachable": false`, `"unreachable_since"`
(ISO 8601 with the UTC offset, as `datetime.isoformat` writes it) and `"no_answer_s"`.

Times are wall-clock seconds (`time.time()`); the callers convert monotonic readings.
"""

from __future__ import annotations

import time
from datetime import datetime
from typing import Any


def clock_hms(wall_s: float) -> str:
    """Local time of day, as a person compares it with their own watch."""
    return time.strftime("%H:%M:%S", time.localtime(wall_s))


def iso_time(wall_s: float) -> str:
    """`2026-11-22T09:42:10+00:00`: local time with its offset, to the second."""
    return datetime.fromtimestamp(wall_s).astimezone().isoformat(timespec="seconds")


def no_answer_s(since_s: float, now_s: float) -> int:
    return max(0, round(now_s - since_s))


def unreachable_words(since_s: float, now_s: float) -> str:
    """"unreachable since 21:16:24 (no answer for 35 s)"."""
    return f"unreachable since {clock_hms(since_s)} (no answer for {no_answer_s(since_s, now_s)} s)"


def reach_json(since_s: float | None, now_s: float, why: str | None = None) -> dict[str, Any]:
    """`{"reachable": true}`, or false with since when, for how long, and why."""
    if since_s is None:
        return {"reachable": True, "unreachable_since": None, "no_answer_s": None}
    out: dict[str, Any] = {"reachable": False, "unreachable_since": iso_time(since_s),
                           "no_answer_s": no_answer_s(since_s, now_s)}
    if why is not None:
        out["why"] = why
    return out
