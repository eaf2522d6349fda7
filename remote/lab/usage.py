"""`tfctl usage` as data: the lab's GPU-hours per user, run kind, host, GPU or day; pure.

From each host's `usage` answer (remote/agent/ledger.py: a row per user, run or process, GPU
and hour, every user's, read from the host's ledger as claims are read). A host that did not
answer is named and its hours are left out: never counted as zero. The idle-held share is the
seconds a GPU was held under the idle threshold over the seconds it was held; the energy is
the board's (nvidia-smi measures whole boards) over the seconds that had a power reading, and
is said unknown where none had one.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from tfctl.remote.agent.vocab import UsageAnswer

By = Literal["user", "host", "gpu", "day"]
BY: tuple[By, ...] = ("user", "host", "gpu", "day")
KINDS = ("run", "session", "other")
"""tfctl runs, tfctl sessions, and processes tfctl did not start (seen by the samplers)."""
WEEK_S = 7 * 86400.0


@dataclass(frozen=True)
class UsageRow:
    """One host's ledger row: a user's run (or process) on one GPU in one hour."""

    host: str
    user: str
    kind: str
    ident: str
    job: str | None
    gpu: str
    index: int | None
    hour: int
    """Epoch seconds // 3600."""
    held_s: float
    idle_s: float
    energy_j: float
    power_s: float
    """The held seconds that had a power reading (the energy's)."""


@dataclass
class Total:
    """GPU time of one group (a user, host, GPU or day)."""

    key: str
    held_s: float = 0.0
    idle_s: float = 0.0
    energy_j: float = 0.0
    power_s: float = 0.0
    by_kind: dict[str, float] = field(default_factory=lambda: dict.fromkeys(KINDS, 0.0))
    users: set[str] = field(default_factory=set)

    @property
    def gpu_hours(self) -> float:
        return self.held_s / 3600

    @property
    def idle_share(self) -> float | None:
        return None if self.held_s <= 0 else self.idle_s / self.held_s

    @property
    def energy_wh(self) -> float | None:
        """None where no held second had a power reading (unknown, never 0)."""
        return None if self.power_s <= 0 else self.energy_j / 3600

    @property
    def energy_partial(self) -> bool:
        """Some held seconds had no power reading: the energy is a lower bound."""
        return 0 < self.power_s < self.held_s - 1


@dataclass(frozen=True)
class Usage:
    since_s: float
    until_s: float
    by: By
    totals: tuple[Total, ...]
    answered: tuple[str, ...]
    unanswered: Mapping[str, str]
    """Host → why it did not answer: its hours are left out."""
    warnings: tuple[str, ...] = ()
    idle_below_pct: float | None = None
    rows: tuple[UsageRow, ...] = ()
    """The answered hosts' rows (what the page draws per user and per host)."""


def host_rows(host: str, answer: UsageAnswer) -> list[UsageRow]:
    """One host's answer as rows (a malformed row is skipped)."""
    rows = []
    for raw in answer.rows:
        try:
            rows.append(UsageRow(host, str(raw["user"]), str(raw["kind"]), str(raw["id"]),
                                 None if raw.get("job") is None else str(raw["job"]),
                                 str(raw["gpu"]), raw.get("index"), int(raw["hour"]),
                                 max(0.0, float(raw["held_s"])), max(0.0, float(raw["idle_s"])),
                                 max(0.0, float(raw.get("energy_j") or 0)),
                                 max(0.0, float(raw.get("power_s") or 0))))
        except (KeyError, TypeError, ValueError):
            continue
    return rows


def day_of(hour: int) -> str:
    """The local date of an epoch hour, `2026-11-29`."""
    return time.strftime("%Y-%m-%d", time.localtime(hour * 3600))


def key_of(row: UsageRow, by: By) -> str:
    if by == "user":
        return row.user
    if by == "host":
        return row.host
    if by == "gpu":
        return f"{row.host}:{row.index if row.index is not None else row.gpu}"
    return day_of(row.hour)


def totals(rows: Iterable[UsageRow], by: By) -> list[Total]:
    """The rows summed per group of `by`, the most GPU time first."""
    groups: dict[str, Total] = {}
    for row in rows:
        key = key_of(row, by)
        total = groups.setdefault(key, Total(key))
        total.held_s += row.held_s
        total.idle_s += min(row.idle_s, row.held_s)
        total.energy_j += row.energy_j
        total.power_s += row.power_s
        total.by_kind[row.kind if row.kind in KINDS else "other"] += row.held_s
        total.users.add(row.user)
    return sorted(groups.values(), key=lambda t: (-t.held_s, t.key))


def summarize(answers: Mapping[str, UsageAnswer], failed: Mapping[str, str],
              hosts: Sequence[str], since_s: float, until_s: float, by: By) -> Usage:
    """Every answered host's rows summed per `by`; the hosts that did not answer, named."""
    rows = [r for h in hosts if h in answers for r in host_rows(h, answers[h])]
    thresholds = {a.idle_below_pct for a in answers.values() if a.idle_below_pct is not None}
    return Usage(since_s, until_s, by, tuple(totals(rows, by)),
                 tuple(h for h in hosts if h in answers),
                 {h: failed.get(h, "no answer") for h in hosts if h not in answers},
                 tuple(w for h in hosts if h in answers for w in answers[h].warnings),
                 min(thresholds) if thresholds else None, tuple(rows))


def shares(held: Iterable[Mapping[str, Sequence[float]]]) -> dict[str, float]:
    """Each user's share of the GPU-seconds held, summed over hosts' `{user: [held_s, idle_s]}`
    (the `lab` answer's `week_held`)."""
    summed: dict[str, float] = {}
    for host in held:
        for user, values in host.items():
            summed[user] = summed.get(user, 0.0) + max(0.0, float(values[0]))
    whole = sum(summed.values())
    return {u: s / whole for u, s in summed.items()} if whole > 0 else {}


# ---------------------------------------------------------------- words, JSON and CSV

def hours_words(seconds: float) -> str:
    return f"{seconds / 3600:.2f} h" if seconds >= 36 else f"{seconds:.0f} s"


def share_words(share: float | None) -> str:
    return "–" if share is None else f"{share * 100:.0f} %"


def energy_words(total: Total) -> str:
    if total.energy_wh is None:
        return "unknown"
    return f"{'≥' if total.energy_partial else ''}{total.energy_wh:.1f} Wh"


def total_json(total: Total) -> dict[str, Any]:
    return {"key": total.key, "gpu_seconds": round(total.held_s, 1),
            "gpu_hours": round(total.gpu_hours, 4), "idle_seconds": round(total.idle_s, 1),
            "idle_share": None if total.idle_share is None else round(total.idle_share, 4),
            "energy_wh": None if total.energy_wh is None else round(total.energy_wh, 3),
            "energy_lower_bound": total.energy_partial,
            "seconds_by_kind": {k: round(v, 1) for k, v in total.by_kind.items()},
            "users": sorted(total.users)}


def usage_json(usage: Usage) -> dict[str, Any]:
    return {"since": usage.since_s, "until": usage.until_s, "by": usage.by,
            "idle_below_pct": usage.idle_below_pct,
            "groups": [total_json(t) for t in usage.totals],
            "hosts": list(usage.answered),
            "unanswered": dict(usage.unanswered), "warnings": list(usage.warnings),
            "rows": [row_json(r) for r in usage.rows]}


def row_json(row: UsageRow) -> dict[str, Any]:
    """One ledger row as `usage --json` prints it: a user's run (or process) on one GPU of one
    host in one hour."""
    return {"host": row.host, "user": row.user, "kind": row.kind, "id": row.ident,
            "job": row.job, "gpu": row.gpu, "index": row.index, "hour_start": row.hour * 3600,
            "held_s": row.held_s, "idle_s": row.idle_s,
            "energy_wh": round(row.energy_j / 3600, 4) if row.power_s > 0 else None}


CSV_HEADER = ("key", "gpu_seconds", "gpu_hours", "idle_seconds", "idle_share", "energy_wh",
              "run_seconds", "session_seconds", "other_seconds")


def usage_csv(usage: Usage) -> str:
    import csv
    import io

    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow((usage.by, *CSV_HEADER[1:]))
    for t in usage.totals:
        writer.writerow((t.key, f"{t.held_s:.1f}", f"{t.gpu_hours:.4f}", f"{t.idle_s:.1f}",
                         "" if t.idle_share is None else f"{t.idle_share:.4f}",
                         "" if t.energy_wh is None else f"{t.energy_wh:.3f}",
                         *(f"{t.by_kind[k]:.1f}" for k in KINDS)))
    return out.getvalue()

