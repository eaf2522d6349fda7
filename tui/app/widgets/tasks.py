"""The tasks table, drawn with the line API: a sticky header line, one cached line per task.

Why not DataTable: any `update_cell` makes a DataTable re-render every visible cell through
Rich (measured here: about half of the dashboard's CPU at 16 hosts, because uptimes change on
every poll). Here a poll re-renders only the rows whose text changed, each as one `Text`, and
column widths are fixed (docs/field-notes.md §5: never re-measure widths in a refresh loop).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from rich.text import Text
from textual.binding import Binding, BindingType
from textual.events import Click, Resize
from textual.geometry import Region, Size
from textual.message import Message
from textual.reactive import reactive
from textual.strip import Strip

from tfctl.tui.app.model.board import DOWN, IDLE, OK, STALE, WARN, TaskRow
from tfctl.tui.app.model.cells import ellipsize
from tfctl.tui.app.widgets.lines import CachedLines

# (title, width); the exit status is part of the state ("exited 1", "killed by SIGKILL"), as
# `tfctl status` says it, which keeps the table narrow enough to sit beside the hosts.
COLUMNS: tuple[tuple[str, int], ...] = (
    ("task", 13), ("host", 8), ("GPU", 3), ("state / exit", 12), ("up", 7), ("rst", 3),
    ("steps/s", 7),
)
GAP = 2
STATE_COLUMN = 3
DIR = ("dir", 12)
"""The task's working directory, its end kept (where the names differ): a column of its own
only where the last line keeps LAST_LINE_ROOM beside it (a failed task's error line says more
than its directory)."""
LAST_LINE_ROOM = 30
CURSOR_FOCUSED = "bold on #0178d4"  # a background, so coloured cells stay readable
CURSOR_BLURRED = "on grey23"
STATE_STYLE = {OK: "green", IDLE: "dim", STALE: "yellow", WARN: "dark_orange", DOWN: "bold red"}
HEADER_LINE = -1  # the sticky header's key in the line cache (rows are 0, 1, …)


class TasksTable(CachedLines, can_focus=True):
    """Task, host, GPU mask, state/exit, uptime, restarts, steps/s, working directory, last
    log line.

    ↑/↓ (k/j), PgUp/PgDn, Home/End move the cursor; Enter or a double click picks the task
    (its log is shown)."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("up,k", "move(-1)", "Up", show=False),
        Binding("down,j", "move(1)", "Down", show=False),
        Binding("pageup", "move(-10)", "Page up", show=False),
        Binding("pagedown", "move(10)", "Page down", show=False),
        Binding("home", "move(-100000)", "First", show=False),
        Binding("end", "move(100000)", "Last", show=False),
        Binding("enter", "choose", "Show its log", show=False),
    ]

    cursor_row: reactive[int] = reactive(0)

    class TaskChosen(Message):
        """The user picked a task (Enter or double click)."""

        def __init__(self, task: str) -> None:
            self.task = task
            super().__init__()

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self._rows: list[TaskRow] = []

    # -- data -----------------------------------------------------------------------------------
    @property
    def rows(self) -> list[TaskRow]:
        return list(self._rows)

    @property
    def row_count(self) -> int:
        return len(self._rows)

    def row(self, name: str) -> TaskRow:
        return next(r for r in self._rows if r.name == name)

    @property
    def selected_task(self) -> str | None:
        if 0 <= self.cursor_row < len(self._rows):
            return self._rows[self.cursor_row].name
        return None

    def show(self, rows: Sequence[TaskRow]) -> None:
        """Adopt new rows; repaint only the lines that changed (all of them if the set did)."""
        old, selected = self._rows, self.selected_task
        self._rows = list(rows)
        if [r.name for r in old] != [r.name for r in rows]:
            self._cache.clear()
            self.virtual_size = Size(self.size.width, len(rows) + 1)
            names = [r.name for r in rows]
            self.cursor_row = names.index(selected) if selected in names else 0
            self.refresh()
            return
        # Only the rows on screen are compared; those off it are forgotten, to be drawn from
        # their new values if they are scrolled to.
        top, size = self.scroll_offset.y, self.size
        end = min(top + size.height - 1, len(rows))  # -1: the header line
        for i in [i for i in self._cache if i != HEADER_LINE and not top <= i < end]:
            del self._cache[i]
        changed = [i for i in range(top, end) if rows[i] != old[i]]
        for i in changed:
            self._cache.pop(i, None)
        if changed:  # one dirty region for the visible changed rows (+1: the header line)
            self.refresh(Region(0, changed[0] + 1 - top, size.width, changed[-1] - changed[0] + 1))

    def _refresh_row(self, index: int) -> None:
        y = index + 1 - self.scroll_offset.y  # +1: the header line
        if 1 <= y < self.size.height:
            self.refresh(Region(0, y, self.size.width, 1))

    # -- cursor ---------------------------------------------------------------------------------
    def move_cursor(self, row: int) -> None:
        if self._rows:
            self.cursor_row = max(0, min(len(self._rows) - 1, row))

    def action_move(self, step: int) -> None:
        self.move_cursor(self.cursor_row + step)

    def action_choose(self) -> None:
        task = self.selected_task
        if task is not None:
            self.post_message(self.TaskChosen(task))

    def watch_cursor_row(self, old: int, new: int) -> None:
        self._cache.pop(old, None)
        self._cache.pop(new, None)
        self._refresh_row(old)
        self._refresh_row(new)
        body = max(1, self.size.height - 1)
        if new < self.scroll_offset.y:
            self.scroll_to(y=new, animate=False)
        elif new >= self.scroll_offset.y + body:
            self.scroll_to(y=new - body + 1, animate=False)

    def on_click(self, event: Click) -> None:
        index = event.y - 1 + self.scroll_offset.y
        if event.y >= 1 and 0 <= index < len(self._rows):
            self.move_cursor(index)
            if event.chain == 2:
                self.action_choose()

    def on_focus(self) -> None:
        self._cache.pop(self.cursor_row, None)
        self._refresh_row(self.cursor_row)

    def on_blur(self) -> None:
        self.on_focus()

    def on_resize(self, event: Resize) -> None:
        self._cache.clear()
        self.virtual_size = Size(event.size.width, len(self._rows) + 1)

    # -- drawing --------------------------------------------------------------------------------
    def render_line(self, y: int) -> Strip:
        width = self.size.width
        if y == 0:
            strip = self._cache.get(HEADER_LINE)
            if strip is None:
                header = header_text(width)
                header.pad_right(max(0, width - header.cell_len))
                strip = self._cache[HEADER_LINE] = self.strip(header, width)
            return strip
        index = y - 1 + self.scroll_offset.y
        if index >= len(self._rows):
            return self.blank(width)
        strip = self._cache.get(index)
        if strip is None:
            text = row_text(self._rows[index], width)
            if index == self.cursor_row:
                text.pad_right(max(0, width - text.cell_len))
                text.stylize(CURSOR_FOCUSED if self.has_focus else CURSOR_BLURRED)
            strip = self._cache[index] = self.strip(text, width)
        return strip


def columns(width: int) -> tuple[tuple[str, int], ...]:
    """The fixed columns at this width: the directory's where there is room for it."""
    fixed = sum(w + GAP for _, w in COLUMNS) + DIR[1] + GAP
    return (*COLUMNS, DIR) if width >= fixed + LAST_LINE_ROOM else COLUMNS


def header_text(width: int) -> Text:
    text = Text(style="bold")
    for title, col_width in columns(width):
        text.append(f"{title:<{col_width}}" + " " * GAP)
    text.append("last line")
    return text


def row_text(row: TaskRow, width: int) -> Text:
    shown = columns(width)
    dir_tail = row.cwd if len(row.cwd) <= DIR[1] else "…" + row.cwd[-(DIR[1] - 1):]
    values = (row.name, row.host, row.mask, row.state, row.up, row.restarts, row.rate,
              dir_tail)[:len(shown)]
    text = Text()
    for column, ((_, col_width), value) in enumerate(zip(shown, values, strict=True)):
        style = STATE_STYLE.get(row.level, "") if column == STATE_COLUMN else ""
        text.append(f"{ellipsize(value, col_width):<{col_width}}", style)
        text.append(" " * GAP)
    rest = max(0, width - text.cell_len)
    text.append(ellipsize(row.last, rest), "dim")
    return text
