"""The lab in the dashboard (`L`): every GPU of every host, one row each, as `tfctl lab` shows it.

The rows are `tfctl.remote.lab.view`'s (the same words as the command: `row_cells`); reading
the hosts is a thread worker (one agent request per host), posted back as a message, so the
screen never blocks. `r` reads again; Esc closes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, ClassVar

from textual import work
from textual.binding import Binding, BindingType
from textual.message import Message
from textual.widgets import DataTable

from tfctl.remote.lab.view import HostLab, row_cells
from tfctl.tui.app.dialogs import READING, TableDialog


class LabRead(Message):
    def __init__(self, hosts: Sequence[HostLab], error: str | None) -> None:
        super().__init__()
        self.hosts, self.error = hosts, error


def lab_cells(found: HostLab) -> list[tuple[str, ...]]:
    """A host's rows as the table's cells (pure)."""
    out: list[tuple[str, ...]] = []
    for row in found.rows:
        c = row_cells(row, found.week_shares)
        out.append((row.host, "–" if row.index is None else str(row.index), c["state"],
                    c["who"], c["what"], c["since"], c["util"], c["mem"], c["note"]))
    return out


class LabScreen(TableDialog):
    """Who holds or reserves which GPU of the lab; `r` reads again, Esc closes."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,q,L", "close", "Close"),
        Binding("r", "reload", "Read again"),
    ]

    NAME = "lab"
    HEADING = "The lab · who holds which GPU · r: read again · Esc: close"
    COLUMNS = ("host", "gpu", "state", "who", "what", "since", "util", "mem", "note")

    def __init__(self, read_lab: Callable[[], Sequence[Any]]) -> None:
        super().__init__()
        self.read_lab = read_lab

    @work(thread=True, exclusive=True)
    def load(self) -> None:
        try:
            self.post_message(LabRead(list(self.read_lab()), None))
        except Exception as exc:  # a host error: say it, the screen stays usable
            self.post_message(LabRead([], str(exc)))

    def on_lab_read(self, message: LabRead) -> None:
        table = self.query_one(DataTable)
        table.clear()
        for found in message.hosts:
            for cells in lab_cells(found):
                table.add_row(*cells)
        rows = [r for found in message.hosts for r in found.rows]
        counts = {s: sum(r.state == s for r in rows) for s in ("free", "reserved", "held")}
        warnings = [w for found in message.hosts for w in found.warnings]
        status = message.error or (", ".join(f"{n} {s}" for s, n in counts.items())
                                   + "".join(f" · ⚠ {w}" for w in warnings))
        self.say(status)
        table.focus()

    def action_reload(self) -> None:
        self.say(READING)
        self.load()
