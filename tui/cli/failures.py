"""A failed run's story, in its tasks' own words: which task failed (first), the lines of its
log that name the error, and the hint for a known failure (`remote/runs/failure.py`).

`status` tells it for every failed task; `wait` and `up --wait` tell it for the task that
failed first, before the exit status, so a script or a notebook that only waits still reads
why. Pure: lines in, lines out.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tfctl.remote.runs.failure import explain
from tfctl.remote.runs.status import TaskStatus

TAIL_LINES = 5
"""The lines of a failed task's log told (its error lines first, `explain`)."""


def failed_first(tasks: Sequence[TaskStatus]) -> TaskStatus | None:
    """The failed task that ended first (by its end time; one without a known end after those
    with one, in the run's order), or None when none failed."""
    failed = [(i, t) for i, t in enumerate(tasks) if t.failed]
    if not failed:
        return None
    return min(failed, key=lambda it: (it[1].ended_at is None, it[1].ended_at or 0.0, it[0]))[1]


def task_story(task: TaskStatus, first: bool = False, keep: int = TAIL_LINES,
               framework: str | None = None) -> list[str]:
    """`worker:0 on h1 exited 1; its log says:`, its telling lines (`  worker:0 | ...`) and
    `  hint: ...` when the failure is a known one (`framework`'s, the job's, first). `first`:
    it says `failed first (...)`."""
    failure = explain(task.last_lines, keep=keep, framework=framework)
    how = f"failed first ({task.describe()})" if first else task.describe()
    lines = [f"{task.name} on {task.host} {how}; its log says:" if failure.lines
             else f"{task.name} on {task.host} {how}; its log is empty"]
    lines += [f"  {task.name} | {line}" for line in failure.lines]
    if failure.hint:
        lines.append(f"  hint: {failure.hint}")
    return lines


def story_json(task: TaskStatus | None, keep: int = TAIL_LINES,
               framework: str | None = None) -> dict[str, Any] | None:
    """`{task, host, state, lines, hint}` of the task that failed first, or None."""
    if task is None:
        return None
    failure = explain(task.last_lines, keep=keep, framework=framework)
    return {"task": task.name, "host": task.host, "state": task.describe(),
            "exit_code": task.exit_code, "lines": list(failure.lines), "hint": failure.hint}
