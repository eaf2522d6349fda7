"""A host that cannot reach the task whose end is the job's, in words and as JSON. Pure.

The run's watcher on each host (`remote/agent/watch.py`) looks at the chief's task port every
second. A refusal there says the chief has ended; no answer at all (a timeout, no route) is
silence: a cut link, a switch rebooting, the chief's host powered off. Silence never ends the
host's part within the job's silence window (`job.silence_window`); while it lasts the watcher
records it, and `status`, `gpus` and the dashboard say it in one sentence:
"h2 cannot reach worker:0 on h1 (10.0.0.5:2223) since 21:16:24 (silent for 35 s: timed out);
its tasks keep running until 21:26:24". The --json forms carry the same facts, times as ISO 8601
with the UTC offset (`tfctl.remote.reach.iso_time`).

Times are wall-clock seconds (`time.time()`), as the host's watcher records them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from tfctl.remote.reach import clock_hms, iso_time, no_answer_s


@dataclass(frozen=True)
class Silence:
    host: str
    """The host whose watcher hears nothing."""
    task: str
    """The task it cannot reach: the chief, worker 0 in the flags style, or a worker."""
    since_s: float
    task_host: str | None = None
    address: str | None = None
    port: int | None = None
    why: str = ""
    """The failed connect in its own words: `timed out`, `No route to host`."""
    window_s: float | None = None
    """The job's silence window: the host ends its part once the silence lasts this long."""

    @property
    def ends_part_at_s(self) -> float | None:
        return None if self.window_s is None else self.since_s + self.window_s

    def words(self, now_s: float) -> str:
        where = f" on {self.task_host}" if self.task_host else ""
        if self.address is not None and self.port is not None:
            where += f" ({self.address}:{self.port})"
        why = f": {self.why}" if self.why else ""
        text = (f"{self.host} cannot reach {self.task}{where} since {clock_hms(self.since_s)} "
                f"(silent for {no_answer_s(self.since_s, now_s)} s{why})")
        ends = self.ends_part_at_s
        if ends is not None:
            text += f"; its tasks keep running until {clock_hms(ends)}"
        return text

    def to_json(self, now_s: float) -> dict[str, Any]:
        ends = self.ends_part_at_s
        return {"host": self.host, "task": self.task, "task_host": self.task_host,
                "address": self.address, "port": self.port, "since": iso_time(self.since_s),
                "silent_s": no_answer_s(self.since_s, now_s), "why": self.why,
                "window_s": self.window_s, "ends_part_at": None if ends is None else iso_time(ends)}


def silences_from(host: str, raws: Iterable[Mapping[str, Any]]) -> tuple[Silence, ...]:
    """The silences in one host's status answer (`silences`); a malformed entry is skipped."""
    found = []
    for raw in raws:
        try:
            port, window = raw.get("port"), raw.get("window_s")
            found.append(Silence(
                host=host, task=str(raw["task"]), since_s=float(raw["since"]),
                task_host=None if raw.get("host") is None else str(raw["host"]),
                address=None if raw.get("address") is None else str(raw["address"]),
                port=None if port is None else int(port), why=str(raw.get("why") or ""),
                window_s=None if window is None else float(window)))
        except (AttributeError, KeyError, TypeError, ValueError):
            continue
    return tuple(found)
