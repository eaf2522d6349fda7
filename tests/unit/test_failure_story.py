"""A failed run's story (tui/cli/failures.py): the task that failed first, its telling lines and
hint, as `status`, `wait` and `up --wait` tell it."""

from __future__ import annotations

import pytest

from tfctl.remote.runs.status import TaskStatus
from tfctl.tui.cli.failures import failed_first, story_json, task_story

KERAS = ("Traceback (most recent call last):",
         '  File "train.py", line 88, in <module>',
         "    train_accuracy.reset_states()",
         "AttributeError: 'SparseCategoricalAccuracy' object has no attribute 'reset_states'")


def task(name: str, state: str = "running", exit_code: int | None = None,
         ended_at: float | None = None, lines: tuple[str, ...] = ()) -> TaskStatus:
    kind, index = name.split(":")
    return TaskStatus(name=name, host="h" + index, state=state, exit_code=exit_code,
                      ended_at=ended_at, last_lines=lines, type=kind, index=int(index))


@pytest.mark.parametrize(("tasks", "first"), [
    ([task("worker:0"), task("worker:1")], None),
    ([task("worker:0", "exited", 0, 5.0), task("worker:1", "exited", 1, 9.0)], "worker:1"),
    ([task("worker:0", "exited", 1, 9.0), task("worker:1", "exited", 1, 4.0)], "worker:1"),
    ([task("ps:0", "killed"), task("worker:0", "exited", 1, 4.0)], "worker:0"),
    ([task("ps:0", "killed"), task("worker:0", "killed")], "ps:0"),
    ([task("worker:0", "exited", 1, 4.0), task("worker:1", "exited", 2, 4.0)], "worker:0"),
])
def test_the_task_that_failed_first(tasks: list[TaskStatus], first: str | None) -> None:
    found = failed_first(tasks)
    assert (found.name if found else None) == first


def test_the_story_is_the_error_lines_and_the_hint() -> None:
    told = task_story(task("worker:1", "exited", 1, 3.0, ("epoch 0: loss 0.61", *KERAS)),
                      first=True, keep=2)
    assert told[0] == "worker:1 on h1 failed first (exited 1); its log says:"
    assert told[1:3] == ["  worker:1 | epoch 0: loss 0.61", "  worker:1 | " + KERAS[-1]]
    assert told[3].startswith("  hint: Keras 2 code under Keras 3")
    assert "job.keras: legacy" in told[3]
    assert len(told) == 4
    killed = TaskStatus(name="ps:0", host="h0", state="killed", signal="SIGKILL", type="ps")
    assert task_story(killed) == ["ps:0 on h0 killed by SIGKILL; its log is empty"]


def test_the_story_as_json() -> None:
    assert story_json(None) is None
    data = story_json(task("worker:0", "exited", 1, 3.0, KERAS), keep=1)
    assert data is not None and data["task"] == "worker:0" and data["host"] == "h0"
    assert (data["state"], data["exit_code"], data["lines"]) == ("exited 1", 1, [KERAS[-1]])
    assert "job.keras: legacy" in data["hint"]
