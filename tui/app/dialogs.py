"""Modal screens: a yes/no confirmation for destructive actions (and for launching onto busy
GPUs), the key help, and the frame of a table read from the hosts (past runs, the lab)."""

from __future__ import annotations

from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, DataTable, Static

HELP_TEXT = """\
[b]Actions[/b] (each runs in the background; results appear as notifications)
  [b]u[/b]  up: sync the code and start every task of the plan
     (asks first where other processes hold the GPUs it assigns)
  [b]d[/b]  down: stop exactly this run's processes (asks first)
  [b]s[/b]  sync the code to every host
  [b]r[/b]  restart the selected task (asks first); a lost one, or from the hosts
     every lost task of the host, starts again in the run (as `tfctl restart`)
  [b]t[/b]  open / close the TensorBoard tunnel (the URL shows in the header)
  [b]x[/b]  a shell on the selected host, or in the selected task's folder and environment
     (the dashboard comes back when it ends; as `tfctl ssh HOST|TASK`)
  [b]h[/b]  past runs: Enter writes the selected run's report and opens it
  [b]L[/b]  the lab: every GPU of every host, free, reserved or held and by whom
     (as `tfctl lab`: other users' runs, reservations, idle holders, stale claims)

[b]Views[/b]
  [b]g[/b]  GPUs and tasks        [b]l[/b]  logs
  [b]F[/b]  all findings
  [b]Tab[/b] move between hosts, tasks and logs
  hosts: [b]↑/↓[/b] pick, [b]Enter[/b] focus (the tasks table follows), [b]Esc[/b] all hosts
  tasks: [b]↑/↓[/b] pick, [b]Enter[/b] show its log

[b]Logs[/b]
  [b]a[/b]  all tasks, merged     [b]/[/b]  filter     [b]f[/b]  follow on/off

[b]?[/b] this help    [b]q[/b] quit (the job keeps running)
"""


class ConfirmScreen(ModalScreen[bool]):
    """Asks before something that cannot be undone; `y`/Enter confirms, `n`/Esc declines."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("y", "answer(True)", "Yes"),
        Binding("n,escape", "answer(False)", "No"),
    ]

    def __init__(self, question: str, yes_label: str = "Yes") -> None:
        super().__init__()
        self.question = question
        self.yes_label = yes_label

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog"):
            yield Static(self.question, id="question")
            with Horizontal(id="buttons"):
                yield Button(f"{self.yes_label} (y)", variant="error", id="yes")
                yield Button("Cancel (n)", variant="primary", id="no")

    def on_mount(self) -> None:
        self.query_one("#no", Button).focus()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "yes")

    def action_answer(self, yes: bool) -> None:
        self.dismiss(yes)


class HelpScreen(ModalScreen[None]):
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,q,question_mark,enter", "close", "Close"),
    ]

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog"):
            yield Static(HELP_TEXT, id="help")

    def action_close(self) -> None:
        self.dismiss(None)

    def on_click(self) -> None:
        self.dismiss(None)


READING = "reading the hosts…"


class TableDialog(ModalScreen[None]):
    """A table over the dashboard, its rows read from the hosts by the subclass's `load` (a
    thread worker, so the screen never blocks), a status line under it; Esc closes. The ids
    are `NAME` (the table), `NAME-title` and `NAME-status`."""

    NAME: ClassVar[str]
    HEADING: ClassVar[str]
    COLUMNS: ClassVar[tuple[str, ...]]

    def __init__(self) -> None:
        super().__init__()
        self.status_text = READING

    def say(self, text: str) -> None:
        """The status line under the table (kept as text too: tests read it)."""
        self.status_text = text
        self.query_one(f"#{self.NAME}-status", Static).update(text)

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog"):
            yield Static(self.HEADING, id=f"{self.NAME}-title")
            yield DataTable(id=self.NAME, cursor_type="row")
            yield Static(READING, id=f"{self.NAME}-status")

    def on_mount(self) -> None:
        self.query_one(DataTable).add_columns(*self.COLUMNS)
        self.load()

    def load(self) -> object:
        """Read the rows (the subclass's thread worker), posted back as a message."""
        raise NotImplementedError

    def action_close(self) -> None:
        self.dismiss(None)
