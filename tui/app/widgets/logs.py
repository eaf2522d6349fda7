"""The log pane: Textual's `Log` (about 7,000 lines per CPU-second, docs/field-notes.md §5)
fed in batches, with a filter box that opens on `/`; growing, it repaints itself and not the
screen (`TailLog`)."""

from __future__ import annotations

from collections.abc import Sequence

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.geometry import Size
from textual.message import Message
from textual.reactive import Reactive
from textual.widgets import Input, Log

MAX_SHOWN_LINES = 10_000


class TailLog(Log):
    """Textual's `Log`, whose growth does not lay the screen out again.

    Why: a widget's `virtual_size` is a layout reactive, so each batch of lines made Textual
    reflow the whole screen and repaint it all (the hosts, tasks, borders and footer, once a
    second at 16 hosts). A log that grows while its vertical scrollbar shows keeps its region
    and its scrollbars; only the bar's thumb changes, and that is repainted here. A hidden log
    (another view) is laid out when it is shown. Any other change of size (the first overflow,
    a wider line, a clear) is laid out as before."""

    virtual_size: Reactive[Size] = Reactive(Size(0, 0))

    def watch_virtual_size(self, old: Size, new: Size) -> None:
        if not self.is_on_screen:
            return
        if self.show_vertical_scrollbar and new.height >= old.height and new.width == old.width:
            self.vertical_scrollbar.window_virtual_size = new.height
        else:
            self.refresh(layout=True)


class LogPane(Vertical):
    """Shows what the app gives it; says when the user changed the filter."""

    class FilterChanged(Message):
        def __init__(self, text: str) -> None:
            self.text = text
            super().__init__()

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        # Held, not queried: lines drawn by the app's timer never race the removal at exit.
        self._log = TailLog(max_lines=MAX_SHOWN_LINES, auto_scroll=True, id="log")
        self._filter = Input(placeholder="filter (Enter keeps it, Esc clears)", id="log-filter")

    def compose(self) -> ComposeResult:
        yield self._log
        yield self._filter

    @property
    def log_widget(self) -> TailLog:
        return self._log

    @property
    def filter_input(self) -> Input:
        return self._filter

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
            if log.auto_scroll and log.show_vertical_scrollbar:
                # Laid out already and not laid out again (`TailLog`): the end is known now,
                # so the view goes there in this frame rather than in one more.
                if not log.is_vertical_scroll_end:
                    log.scroll_end(animate=False, immediate=True)
            else:
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
