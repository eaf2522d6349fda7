"""The log pane: Textual's `Log` (about 7,000 lines per CPU-second, docs/field-notes.md §5)
fed in batches, with a filter box that opens on `/`."""

from __future__ import annotations

from collections.abc import Sequence

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.message import Message
from textual.widgets import Input, Log

MAX_SHOWN_LINES = 10_000


class LogPane(Vertical):
    """Shows what the app gives it; says when the user changed the filter."""

    class FilterChanged(Message):
        def __init__(self, text: str) -> None:
            self.text = text
            super().__init__()

    def compose(self) -> ComposeResult:
        yield Log(max_lines=MAX_SHOWN_LINES, auto_scroll=True, id="log")
        yield Input(placeholder="filter (Enter keeps it, Esc clears)", id="log-filter")

    @property
    def log_widget(self) -> Log:
        return self.query_one("#log", Log)

    @property
    def filter_input(self) -> Input:
        return self.query_one("#log-filter", Input)

    def replace(self, lines: Sequence[str]) -> None:
        log = self.log_widget
        log.clear()
        if lines:
            log.write_lines(lines[-MAX_SHOWN_LINES:], scroll_end=log.auto_scroll)
            self._end_after_layout()

    def append(self, lines: Sequence[str]) -> None:
        """Following (`f` toggles it), the view goes to the newest line every time. Why not
        `Log`'s own rule (stick only if already at the end): the first batch lands before the
        pane has its height, which leaves it at the top for good."""
        if lines:
            log = self.log_widget
            log.write_lines(lines, scroll_end=log.auto_scroll)
            self._end_after_layout()

    def _end_after_layout(self) -> None:
        log = self.log_widget
        if log.auto_scroll:
            log.call_after_refresh(log.scroll_end, animate=False, immediate=True)

    @property
    def following(self) -> bool:
        return self.log_widget.auto_scroll

    def toggle_follow(self) -> bool:
        log = self.log_widget
        log.auto_scroll = not log.auto_scroll
        if log.auto_scroll:
            log.scroll_end(animate=False)
        return log.auto_scroll

    def open_filter(self) -> None:
        box = self.filter_input
        box.display = True
        box.focus()

    def on_input_changed(self, event: Input.Changed) -> None:
        event.stop()
        self.post_message(self.FilterChanged(event.value))

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        box = self.filter_input
        box.display = bool(box.value)
        self.log_widget.focus()

    def key_escape(self) -> None:
        box = self.filter_input
        if box.has_focus:
            box.value = ""
            box.display = False
            self.log_widget.focus()
