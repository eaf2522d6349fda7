"""Past runs in the dashboard (`h`): the runs the hosts remember, and a run's report on Enter.

The screen never blocks: the list and the report come from thread workers (listing reads every
host; a report fetches the run's records with rsync and draws them), and their results are
posted back as messages. Opening the written page is the injected `opener` (the browser by
default; a recorder in tests).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

from textual import work
from textual.binding import Binding, BindingType
from textual.message import Message
from textual.widgets import DataTable

from tfctl.tui.app.dialogs import TableDialog

Reporter = Callable[[str], str]
"""Run id → the path of its written report page."""


class RunsListed(Message):
    def __init__(self, runs: Sequence[Any], error: str | None) -> None:
        super().__init__()
        self.runs, self.error = runs, error


class ReportWritten(Message):
    def __init__(self, run_id: str, page: str | None, error: str | None) -> None:
        super().__init__()
        self.run_id, self.page, self.error = run_id, page, error


def open_in_browser(page: str) -> object:
    import webbrowser
    from pathlib import Path

    return webbrowser.open(Path(page).resolve().as_uri())


def describe_run(run: Any) -> tuple[str, str, str, str]:
    started = time.strftime("%m-%d %H:%M", time.localtime(run.started_at or 0))
    took = "running" if run.live else (
        f"{run.duration_s:.0f} s" if run.duration_s is not None else "?")
    return run.run_id, started, took, run.ended or "running"


class RunsScreen(TableDialog):
    """The past runs; Enter writes and opens the selected run's report, Esc closes."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,q,h", "close", "Close"),
        Binding("enter", "report", "Report"),
    ]

    NAME = "runs"
    HEADING = "Past runs · Enter: the run's report · Esc: close"
    COLUMNS = ("run", "started", "took", "ended")

    def __init__(self, list_runs: Callable[[], Sequence[Any]], reporter: Reporter | None,
                 opener: Callable[[str], object]) -> None:
        super().__init__()
        self.list_runs, self.reporter, self.opener = list_runs, reporter, opener
        self.run_ids: list[str] = []

    @work(thread=True)
    def load(self) -> None:
        try:
            self.post_message(RunsListed(list(self.list_runs()), None))
        except Exception as exc:  # a host error: say it, the screen stays usable
            self.post_message(RunsListed([], str(exc)))

    def on_runs_listed(self, message: RunsListed) -> None:
        table = self.query_one(DataTable)
        self.run_ids = [run.run_id for run in message.runs]
        for run in message.runs:
            table.add_row(*describe_run(run), key=run.run_id)
        status = message.error or (f"{len(message.runs)} runs" if message.runs
                                   else "no runs on the hosts yet")
        self.say(status)
        table.focus()

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        event.stop()
        self.action_report()  # Enter on a row: the table takes the key and says so

    def action_report(self) -> None:
        table = self.query_one(DataTable)
        if not self.run_ids or self.reporter is None:
            self.notify("no report: nothing selected, or reports are not available here")
            return
        run_id = self.run_ids[table.cursor_row]
        self.say(f"writing the report of {run_id}…")
        self.write(run_id)

    @work(thread=True)
    def write(self, run_id: str) -> None:
        assert self.reporter is not None
        try:
            self.post_message(ReportWritten(run_id, self.reporter(run_id), None))
        except Exception as exc:
            self.post_message(ReportWritten(run_id, None, str(exc)))

    def on_report_written(self, message: ReportWritten) -> None:
        if message.page is None:
            self.say(f"report of {message.run_id} failed: {message.error}")
            return
        self.say(f"report: {message.page}")
        self.opener(message.page)
