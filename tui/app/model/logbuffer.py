"""The log lines the dashboard keeps, and which of them the log pane shows. Pure.

Every task's lines are kept (bounded), whatever the pane shows, so switching from one task to
all tasks, or changing the filter, redraws from memory instead of asking the hosts again. The
framework's start-up notices are kept folded, one line per task (remote/runs/notices.py), as
every view that follows a run shows them; `tfctl logs` has them as written.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass

from tfctl.remote.runs.notices import NoticeFold

DEFAULT_KEEP_LINES = 20_000


@dataclass(frozen=True)
class LogView:
    """What the pane shows: one task (or all, merged and prefixed) and a filter (substring)."""

    task: str | None = None
    filter: str = ""

    def wants(self, task: str, line: str) -> bool:
        """Merged, the filter also matches the task prefix the user sees (`worker:2`)."""
        if self.task is not None and task != self.task:
            return False
        if not self.filter:
            return True
        needle = self.filter.lower()
        return needle in line.lower() or (self.task is None and needle in task.lower())

    def title(self) -> str:
        who = self.task or "all tasks"
        return f"Logs · {who}" + (f" · filter “{self.filter}”" if self.filter else "")


class LogBuffer:
    def __init__(self, keep_lines: int = DEFAULT_KEEP_LINES, prefix_width: int = 0) -> None:
        """`prefix_width`: the longest task name expected, so merged prefixes line up from
        the first line (it still grows for a longer name)."""
        self._lines: deque[tuple[str, str]] = deque(maxlen=keep_lines)
        self._width = prefix_width
        self._notices = NoticeFold()

    def __len__(self) -> int:
        return len(self._lines)

    def add(self, lines: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
        """Keep `lines`, the start-up notices folded; the lines kept (what the pane draws)."""
        kept = self._notices.lines(lines)
        for task, line in kept:
            self._width = max(self._width, len(task))
            self._lines.append((task, line))
        return kept

    def render(self, view: LogView, lines: Iterable[tuple[str, str]] | None = None) -> list[str]:
        """The pane's text for `lines` (default: everything kept) under `view`."""
        source = self._lines if lines is None else lines
        if view.task is not None:
            return [line for task, line in source if view.wants(task, line)]
        width = self._width
        return [f"{task:<{width}} │ {line}" for task, line in source if view.wants(task, line)]
