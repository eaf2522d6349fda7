"""A run the lab's policy has warned as idle, in words (pure; docs/policy.md).

The run's watcher on a host (agent/idlewatch.py) records since when the run's GPUs there have
been idle and when the policy stops it (`idle.json`, read by `status`; the run's claim, read by
every user's `lab`). `tfctl status`, `tfctl lab` and the dashboard say it the same way.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any


def idle_line(since_s: float, stop_at_s: float, now_s: float) -> str:
    """`idle 1:05 — stops at 14:30 by the lab's policy` (hours:minutes idle, the local clock)."""
    minutes = int(max(0.0, now_s - since_s)) // 60
    return (f"idle {minutes // 60}:{minutes % 60:02d} — stops at "
            f"{time.strftime('%H:%M', time.localtime(stop_at_s))} by the lab's policy")


def idle_words(host: str, state: Mapping[str, Any], now_s: float) -> str:
    """`idle 1:05 on h1 (GPU 0 under 5 %) — stops at 14:30 by the lab's policy`, from a host's
    `idle.json` as `status` answers it."""
    since, stop_at = float(state.get("since") or now_s), float(state.get("stop_at") or now_s)
    gpus = ",".join(str(g) for g in state.get("gpus") or ())
    under = state.get("below_util_pct")
    what = f" (GPU {gpus} under {under:g} %)" if gpus and isinstance(under, int | float) else ""
    head, _, tail = idle_line(since, stop_at, now_s).partition(" — ")
    return f"{head} on {host}{what} — {tail}"
