"""`CachedLines`: what the hosts and tasks views share, a line-API view that keeps its lines.

Each screen line is a Strip kept until its row changes (the views drop the ones that did), drawn
over the widget's base style, which is looked up once rather than per line: Textual's
`rich_style` walks the widget's ancestors and their CSS each time (about 60 µs, a third of what
drawing one GPU line costs). Both are dropped when the widget's styles change (focus, theme).
"""

from __future__ import annotations

from rich.style import Style
from rich.text import Text
from textual.scroll_view import ScrollView
from textual.strip import Strip


class CachedLines(ScrollView):
    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self._cache: dict[int, Strip] = {}
        self._base: Style | None = None

    @property
    def base_style(self) -> Style:
        """The widget's `rich_style`, as of its last style update."""
        if self._base is None:
            self._base = self.rich_style
        return self._base

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._base = None
        self._cache.clear()

    def blank(self, width: int) -> Strip:
        return Strip.blank(width, self.base_style)

    def strip(self, text: Text, width: int) -> Strip:
        """`text` as one screen line of `width` cells, its spans over the base style."""
        base = self.base_style
        text.style = base  # the base under the spans, so their colours show
        return Strip(text.render(self.app.console), text.cell_len).crop_extend(0, width, base)
