"""Past-tense messages the thread workers post to the app: what happened, never what to do.

Workers never touch widgets; they post one of these (`post_message` is thread-safe) and the app
updates its board and widgets on the UI thread.
"""

from __future__ import annotations

from collections.abc import Sequence

from textual.message import Message

from tfctl.remote.controller import DownSummary
from tfctl.remote.runs.current import CurrentRun
from tfctl.remote.runs.status import RunStatus, TaskStatus
from tfctl.tui.app.sources import FindingLike


class RunFound(Message):
    def __init__(self, run: CurrentRun | None) -> None:
        self.run = run
        super().__init__()


class HostPolled(Message):
    def __init__(self, host: str, tasks: tuple[TaskStatus, ...], at_s: float) -> None:
        self.host = host
        self.tasks = tasks
        self.at_s = at_s
        super().__init__()


class HostPollFailed(Message):
    def __init__(self, host: str, what: str, error_type: type[Exception], at_s: float) -> None:
        self.host = host
        self.what = what
        self.error_type = error_type
        self.at_s = at_s
        super().__init__()


class RunStatusRead(Message):
    def __init__(self, status: RunStatus | None, at_s: float) -> None:
        self.status = status
        self.at_s = at_s
        super().__init__()


class LogLinesArrived(Message):
    def __init__(self, run_id: str, lines: list[tuple[str, str]],
                 errors: dict[str, str]) -> None:
        self.run_id = run_id
        self.lines = lines
        self.errors = errors
        super().__init__()


class FindingsRead(Message):
    def __init__(self, findings: Sequence[FindingLike]) -> None:
        self.findings = findings
        super().__init__()


class ActionProgressed(Message):
    """A line an action said while running (`up` says each step)."""

    def __init__(self, action: str, text: str) -> None:
        self.action = action
        self.text = text
        super().__init__()


class ActionSucceeded(Message):
    def __init__(self, action: str, title: str, text: str, result: object = None) -> None:
        self.action = action
        self.title = title
        self.text = text
        self.result = result
        super().__init__()


class ActionFailed(Message):
    def __init__(self, action: str, title: str, cause: str) -> None:
        self.action = action
        self.title = title
        self.cause = cause
        super().__init__()


class GpusFoundBusy(Message):
    """`up` refused: GPUs the plan assigns are held by other processes, nothing was started
    (`tfctl.remote.errors.GpusBusy`: one line per holder, and the free GPUs instead)."""

    def __init__(self, action: str, holders: Sequence[str], free: str) -> None:
        self.action = action
        self.holders = tuple(holders)
        self.free = free
        super().__init__()


def down_words(summary: DownSummary) -> str:
    if summary.run_id is None:
        return "No run was found: nothing to stop."
    words = (f"Stopped {len(summary.stopped)} task(s) of run {summary.run_id}: "
             f"{', '.join(summary.stopped)}." if summary.stopped
             else f"Run {summary.run_id} had nothing left to stop.")
    if summary.unreachable:
        words += (f" Unreachable, not stopped: {', '.join(summary.unreachable)} "
                  "— press d again once they are back.")
    return words
