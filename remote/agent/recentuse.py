"""Each user's recent GPU use on this host, as the fair queue weighs it (docs/policy.md).

Part of the agent program (`__init__.py`): stdlib only, Python >= 3.8, Linux, no tfctl imports.

What the queue needs of the past is one number per user: GPU-hours, each hour counting half as
much per `half_life` gone since it was used (`decayed_hours`), so last week's sweep weighs
less than this morning's. `recent_use` gives them as a plain mapping (user → hours), the one
seam between the queue and whatever records use on this host.

The records read here are the smallest that say it: when a run's claim is released (its watcher
saw it end, or `tfctl down`), its owner leaves a use record beside the claims, kind `use`
(`<user>.use.<run id>.json`: GPUs, since, until, GPU-seconds), read as claims are read
(claims.py `read_folder`: the user is the file's owner, a link is never followed, files are
bounded per owner, a file named after another user is skipped). A record with its end before
its start, or in the future, counts nothing (a clock that jumped gives no negative hours).
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from typing import Any

from tfctl.remote.agent.claims import (
    MAX_CLAIM_BYTES,
    Owned,
    claim_file_name,
    claims_dir,
    parse_claim,
    read_folder,
    read_owned,
    release_run,
    remove_claim,
    write_claim,
)
from tfctl.remote.agent.proc import user_name

USE_KIND = "use"
MAX_USE_BYTES = 4 * 1024
KEEP_USE_S = 30 * 86400.0
"""A user's own use records older than this are removed when the next is written: at a
half-life of days they weigh nothing any more."""


def decayed_hours(gpu_s: float, ended_s: float, now_s: float, half_life_s: float) -> float:
    """GPU-seconds used until `ended_s` as GPU-hours halved for each `half_life_s` since then;
    pure."""
    age = max(0.0, now_s - ended_s)
    return max(0.0, gpu_s) / 3600.0 * 0.5 ** (age / half_life_s)


def _use_of(raw: Any, kind: str) -> dict[str, Any]:
    if not isinstance(raw, dict) or kind != USE_KIND:
        raise ValueError("not a use record")
    out = {}
    for key in ("since", "until", "gpu_s"):
        value = raw.get(key)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(f"its {key} is not a number")
        out[key] = float(value)
    return out


def read_use(folder: str | None = None) -> tuple[list, list]:
    """Every use record beside the claims (`{since, until, gpu_s, user, uid, file}`), and the
    warnings of files skipped."""
    return read_folder(folder or claims_dir(), "claims folder", (USE_KIND,), MAX_USE_BYTES,
                       _use_of)


def recent_use(half_life_s: float, now_s: float | None = None,
               folder: str | None = None) -> dict[str, float]:
    """User → decayed GPU-hours of the use records on this host (module doc)."""
    now_s = time.time() if now_s is None else now_s
    records, _ = read_use(folder)
    out: dict[str, float] = {}
    for record in records:
        if record["until"] < record["since"] or record["until"] > now_s + 60:
            continue  # a clock that jumped: no negative or future hours
        out[record["user"]] = out.get(record["user"], 0.0) + decayed_hours(
            record["gpu_s"], record["until"], now_s, half_life_s)
    return out


def record_use(run_id: str, claim: dict[str, Any], now_s: float | None = None,
               folder: str | None = None) -> None:
    """Leave the use record of our run whose claim ends now (its GPUs × the time since its
    `since`), and remove our own use records older than KEEP_USE_S. A courtesy, as the claim:
    never fails the run."""
    now_s = time.time() if now_s is None else now_s
    since = claim.get("since")
    gpus = claim.get("gpus") or []
    if not isinstance(since, (int, float)) or not gpus:
        return
    held_s = max(0.0, now_s - float(since))
    with contextlib.suppress(OSError, ValueError):
        write_claim(USE_KIND, run_id, {"run_id": run_id, "gpus": gpus, "since": float(since),
                                       "until": now_s, "gpu_s": held_s * len(gpus)},
                    folder, check=False)
    me = user_name(os.getuid()) or str(os.getuid())
    with contextlib.suppress(OSError):
        records, _ = read_use(folder)
        for record in records:
            if record["user"] == me and now_s - record["until"] > KEEP_USE_S:
                remove_claim(record["file"], folder)


def release_run_counted(run_id: str) -> bool:
    """Remove our run's claim (claims.py `release_run`), leaving first the record of the GPU
    time it held, which the fair queue weighs."""
    me = user_name(os.getuid()) or str(os.getuid())
    found = read_owned(os.path.join(claims_dir(), claim_file_name(me, "run", run_id)), me,
                       MAX_CLAIM_BYTES)
    if isinstance(found, Owned):
        with contextlib.suppress(ValueError, UnicodeDecodeError):
            record_use(run_id, parse_claim(json.loads(found.data.decode("utf-8"))))
    return release_run(run_id)


def use_file_name(user: str, run_id: str) -> str:
    return claim_file_name(user, USE_KIND, run_id)
