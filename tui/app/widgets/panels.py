"""Small one-purpose panels: the header line, the findings list, the narrow-mode view tabs.

Each redraws only when its text changes (`Static.update` with `layout=False` where the height
is fixed), so a refresh tick that changes nothing costs nothing here.
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.text import Text
from textual.widgets import Static

from tfctl.tui.app.sources import FindingLike
from tfctl.tui.app.widgets.cluster import MARK

FINDING_ORDER = {"error": 0, "warning": 1, "info": 2}


class HeaderBar(Static):
    """`tfctl  lab · run … · running 00:12:41 · 3 hosts 5 GPUs · TensorBoard … ⟳1s`."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__("", id=id)
        self._text: Text | None = None

    def show(self, text: Text) -> None:
        if text != self._text:
            self._text = text
            self.update(text, layout=False)


class FindingsPanel(Static):
    """Findings, worst first; "no findings" when all is well."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__("", id=id)
        self._shown: tuple[tuple[str, str], ...] | None = None
        self._limit: int | None = None
        self._width = 0
        self._none = ""

    def show(self, findings: Sequence[FindingLike], limit: int | None = None,
             none: str = "no findings") -> None:
        """Worst first; beyond `limit` lines, the last says how many more (the F view); `none`
        is said when there are none (`header.no_findings_text`: only what is known)."""
        items = tuple(sorted(((f.level, f.text) for f in findings),
                             key=lambda item: FINDING_ORDER.get(item[0], 9)))
        width = self.content_size.width
        if (items, limit, width, none) == (self._shown, self._limit, self._width, self._none):
            return
        self._shown, self._limit, self._width, self._none = items, limit, width, none
        self.border_title = f"Findings ({len(items)})" if items else "Findings"
        if not items:
            text = Text(none, "dim")
            self.update(text)
            self._fit(text, limit)
            return
        shown = items if limit is None or len(items) <= limit else items[: limit - 1]
        text = Text()
        for i, (level, words) in enumerate(shown):
            glyph, style = MARK.get(level, ("•", ""))
            text.append(f"{glyph} ", style)
            text.append(words)
            if i < len(shown) - 1:
                text.append("\n")
        if len(shown) < len(items):
            text.append(f"\n… {len(items) - len(shown)} more: press F to see them all", "dim")
        self.update(text)
        self._fit(text, limit)

    def _fit(self, text: Text, limit: int | None) -> None:
        """Set the height outright. With `height: auto`, Textual 8 sometimes keeps the height of
        the previous content after `update()` (seen in one run out of three at startup)."""
        if limit is None:
            self.styles.height = "1fr"
            return
        width = max(1, self.content_size.width or self.app.size.width - 4)
        lines = len(text.wrap(self.app.console, width))
        self.styles.height = lines + 2  # the border

    @property
    def count(self) -> int:
        return len(self._shown or ())


class ViewTabs(Static):
    """The narrow-mode tab strip; clicking a name switches the view, as the keys do."""

    TABS = (("tasks", "Tasks", "g"), ("logs", "Logs", "l"), ("findings", "Findings", "F"))

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__("", id=id)
        self._key: tuple[str, int, str | None, str | None] | None = None

    def show(self, current: str, findings: int, log_task: str | None,
             host: str | None) -> None:
        key = (current, findings, log_task, host)
        if key == self._key:
            return
        self._key = key
        parts = []
        for view, label, key_name in self.TABS:
            name = label
            if view == "tasks" and host:
                name = f"{label} · {host}"
            elif view == "findings" and findings:
                name = f"{label} ({findings})"
            elif view == "logs":
                name = f"{label} · {log_task or 'all'}"
            style = "reverse bold" if view == current else "underline"
            parts.append(f"[{style}][@click=app.view('{view}')] {name} [/][/] [dim]{key_name}[/]")
        self.update("  ".join(parts), layout=False)
