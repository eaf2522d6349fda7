"""The cluster view: a line per host and a line per GPU, drawn with Textual's line API.

Why the line API and not a widget per GPU: at 16 hosts × 8 GPUs a Static or Sparkline per row
costs tens of milliseconds per refresh (docs/field-notes.md §5). Here each screen line is a
cached Strip; `show()` compares the new lines with the old and repaints only the ones that changed
and only where they are visible. In compact mode (narrow terminals) each host is one line naming
its worst GPU, and the focused host still unfolds.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from rich.style import Style
from rich.text import Text
from textual.binding import Binding, BindingType
from textual.events import Click, Resize
from textual.geometry import Region, Size
from textual.message import Message
from textual.reactive import reactive
from textual.strip import Strip

from tfctl.tui.app.model import cells
from tfctl.tui.app.model.board import DOWN, IDLE, OK, STALE, WARN
from tfctl.tui.app.model.hostlines import GpuLine, HostLine
from tfctl.tui.app.widgets.lines import CachedLines
from tfctl.tui.app.widgets.tasks import CURSOR_FOCUSED

LEVEL_STYLE = {OK: "green", IDLE: "dim", STALE: "yellow", WARN: "dark_orange", DOWN: "bold red"}
MARK = {"error": ("✖", "bold red"), "warning": ("⚠", "yellow"), "info": ("ℹ", "cyan")}


@dataclass(frozen=True)
class _Row:
    host: int
    line: HostLine | GpuLine
    compact: bool


class ClusterView(CachedLines, can_focus=True):
    """Hosts and their GPUs. ↑/↓ pick a host, Enter focuses it (the tasks table follows)."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("up,k", "cursor(-1)", "Prev host", show=False),
        Binding("down,j", "cursor(1)", "Next host", show=False),
        Binding("enter", "focus_host", "Focus host", show=False),
        Binding("escape", "unfocus_host", "All hosts", show=False),
    ]

    compact: reactive[bool] = reactive(False)
    cursor: reactive[int] = reactive(0)

    class HostFocused(Message):
        """The user focused a host (or cleared the focus: `host` is None)."""

        def __init__(self, host: str | None) -> None:
            self.host = host
            super().__init__()

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self._hosts: list[HostLine] = []
        self._rows: list[_Row] = []
        self.focused_host: str | None = None

    # -- data ---------------------------------------------------------------------------------
    def show(self, hosts: Sequence[HostLine]) -> None:
        """Adopt new host lines; repaint only the screen lines whose content changed."""
        self._hosts = list(hosts)
        self._rebuild()

    @property
    def hosts(self) -> list[HostLine]:
        return self._hosts

    def _rebuild(self) -> None:
        rows: list[_Row] = []
        for i, host in enumerate(self._hosts):
            unfold = not self.compact or host.name == self.focused_host
            rows.append(_Row(i, host, not unfold))
            if unfold:
                rows += [_Row(i, gpu, False) for gpu in host.gpus]
        old = self._rows
        self._rows = rows
        if len(rows) != len(old):
            self._cache.clear()
            self.virtual_size = Size(self.size.width, len(rows))
            self.refresh(layout=True)
            return
        # Only the lines on screen are compared (at 16 hosts × 8 GPUs, 22 of 144); those off
        # it are forgotten, to be drawn from their new rows if they are scrolled to.
        top, size = self.scroll_offset.y, self.size
        end = min(top + size.height, len(rows))
        for y in [y for y in self._cache if not top <= y < end]:
            del self._cache[y]
        changed = [y for y in range(top, end) if rows[y] != old[y]]
        for y in changed:
            self._cache.pop(y, None)
        if changed:  # one dirty region spanning them
            self.refresh(Region(0, changed[0] - top, size.width, changed[-1] - changed[0] + 1))

    def watch_compact(self) -> None:
        self._rebuild()

    def watch_cursor(self, old: int, new: int) -> None:
        self._repaint_host(old)
        self._repaint_host(new)
        for y, row in enumerate(self._rows):
            if row.host == new and isinstance(row.line, HostLine):
                self.scroll_to_region_y(y)
                break

    def scroll_to_region_y(self, y: int) -> None:
        if y < self.scroll_offset.y or y >= self.scroll_offset.y + self.size.height:
            self.scroll_to(y=y, animate=False)

    def _repaint_host(self, index: int) -> None:
        for y, row in enumerate(self._rows):
            if row.host == index and isinstance(row.line, HostLine):
                self._cache.pop(y, None)
                self.refresh_line(y)

    def on_resize(self, event: Resize) -> None:
        self._cache.clear()
        self.virtual_size = Size(event.size.width, len(self._rows))

    def on_focus(self) -> None:
        self._repaint_host(self.cursor)

    def on_blur(self) -> None:
        self._repaint_host(self.cursor)

    # -- actions ------------------------------------------------------------------------------
    def action_cursor(self, step: int) -> None:
        if self._hosts:
            self.cursor = max(0, min(len(self._hosts) - 1, self.cursor + step))

    def action_focus_host(self) -> None:
        if not self._hosts:
            return
        name = self._hosts[self.cursor].name
        self.set_focused_host(None if self.focused_host == name else name)

    def action_unfocus_host(self) -> None:
        self.set_focused_host(None)

    def set_focused_host(self, name: str | None) -> None:
        self.focused_host = name
        self._cache.clear()
        self._rebuild()
        self.refresh()
        self.post_message(self.HostFocused(name))

    def on_click(self, event: Click) -> None:
        y = event.y + self.scroll_offset.y
        if 0 <= y < len(self._rows):
            self.cursor = self._rows[y].host
            if event.chain == 2:
                self.action_focus_host()

    # -- drawing ------------------------------------------------------------------------------
    def render_line(self, y: int) -> Strip:
        index = y + self.scroll_offset.y
        width = self.size.width
        if index >= len(self._rows):
            return self.blank(width)
        strip = self._cache.get(index)
        if strip is None:
            strip = self._cache[index] = self.strip(self._text(self._rows[index], width), width)
        return strip

    def _text(self, row: _Row, width: int) -> Text:
        if isinstance(row.line, GpuLine):
            return gpu_text(row.line, width)
        cursor = row.host == self.cursor
        text = host_compact_text(row.line) if row.compact else host_text(row.line)
        if cursor and self.has_focus:
            text.pad_right(max(0, width - 1 - text.cell_len))
            text.stylize(CURSOR_FOCUSED)
        if row.line.name == self.focused_host:
            text = Text("▸", style="bold cyan") + text
        else:
            text = Text(" ") + text
        return text


def _mark(level: str | None) -> Text:
    if level is None:
        return Text("  ")
    glyph, style = MARK.get(level, ("•", ""))
    return Text(f" {glyph}", style=style)


def host_text(host: HostLine) -> Text:
    text = Text.assemble((host.name, "bold"), "  ", (host.address, "dim"), "  ")
    if host.gpu_count:
        text.append(f"{host.gpu_count} GPU{'s' if host.gpu_count != 1 else ''}  ", "dim")
    text.append(host.state, LEVEL_STYLE.get(host.level, ""))
    if host.note:
        text.append(f"  {host.note}", "dim italic")
    return text + _mark(host.mark)


def host_compact_text(host: HostLine) -> Text:
    text = Text.assemble((f"{host.name:<10}", "bold"), " ")
    if host.level != OK or not host.gpus:
        text.append(host.state or host.note or "", LEVEL_STYLE.get(host.level, ""))
        if host.level == OK and host.note and host.state:
            text.append(f"  {host.note}", "dim italic")
        return text + _mark(host.mark)
    utils = [g.util_pct for g in host.gpus if g.util_pct is not None]
    avg = f"{sum(utils) / len(utils):.0f}%" if utils else cells.NA
    text.append(f"{len(host.gpus)} GPU{'s' if len(host.gpus) != 1 else ''} avg {avg:>4}",
                LEVEL_STYLE[OK])
    worst = host.worst_gpu()
    if worst is not None and len(host.gpus) > 1:
        text.append(f" · worst GPU {worst.index} {cells.pct(worst.util_pct).strip()} "
                    f"{worst.owner}", _util_style(worst.util_pct))
    elif worst is not None:
        text.append(f" · {worst.owner}", "dim")
    return text + _mark(host.mark)


def _columns(width: int) -> tuple[int, int, int, int]:
    """(util bar, memory bar, sparkline, owner) widths that fit `width` cells."""
    fixed = 49  # index, name, percent, memory text, temperature, power, gaps, finding mark
    extra = max(0, width - fixed - 9)
    util_w = max(4, min(20, int(extra * 0.45)))
    spark_w = max(0, min(16, int(extra * 0.35)))
    mem_w = max(3, min(10, int(extra * 0.2)))
    owner_w = max(9, width - fixed - util_w - mem_w - spark_w)
    # Too narrow for the minimums: give up the memory bar, then the utilization bar, then
    # owner characters (the numbers stay).
    over = fixed + util_w + mem_w + spark_w + owner_w - width
    for name in ("mem", "util", "owner"):
        if over <= 0:
            break
        if name == "mem":
            cut = min(over, mem_w)
            mem_w -= cut
        elif name == "util":
            cut = min(over, util_w)
            util_w -= cut
        else:
            cut = min(over, owner_w - 3)
            owner_w -= cut
        over -= cut
    return util_w, mem_w, spark_w, owner_w


def gpu_text(gpu: GpuLine, width: int) -> Text:
    util_w, mem_w, spark_w, owner_w = _columns(width)
    index = "?" if gpu.index is None else str(gpu.index)
    mem_frac = cells.mem_fraction(gpu.mem_used_mib, gpu.mem_total_mib)
    util = gpu.util_pct
    text = Text.assemble(
        f" {index:>2} ", (f"{cells.ellipsize(gpu.name, 11):<11}", "bold"), " ",
        (cells.bar(None if util is None else util / 100, util_w), _util_style(util)),
        cells.pct(util), "  ",
        (cells.bar(mem_frac, mem_w), _mem_style(mem_frac)), " ",
        f"{cells.mem_gib(gpu.mem_used_mib, gpu.mem_total_mib):>10} ",
        (f"{cells.temp_c(gpu.temp_c):>5}", _temp_style(gpu.temp_c)), " ",
        (f"{cells.power_w(gpu.power_w):>5}", "dim" if gpu.power_w is None else ""), " ",
    )
    if gpu.stale:  # "stale since T" where the sparkline, owner and mark were: all of it old
        tail = spark_w + 1 + owner_w + 2
        text.append(f"{cells.ellipsize(gpu.owner, tail):<{tail}}", "yellow")
    else:
        text.append(cells.sparkline(gpu.spark, spark_w), "cyan")
        text.append(" ")
        text.append(f"{cells.ellipsize(gpu.owner, owner_w):<{owner_w}}", _owner_style(gpu.owner))
        text.append_text(_mark(gpu.mark))
    if gpu.dim:
        text.stylize("dim")
    return text


def _util_style(util: float | None) -> str:
    if util is None:
        return "dim"
    return "green" if util >= 50 else ("yellow" if util >= 10 else "dim")


def _mem_style(fraction: float | None) -> str:
    if fraction is None:
        return "dim"
    return "red" if fraction >= 0.95 else "blue"


def _temp_style(temp: float | None) -> str:
    if temp is None:
        return "dim"
    return "bold red" if temp >= 85 else ("yellow" if temp >= 75 else "")


def _owner_style(owner: str) -> str | Style:
    if owner == "idle":
        return "dim"
    return "bold magenta" if owner.startswith("foreign") else "cyan"
