"""The dashboard's past runs (`h`): listed from the hosts, a run's report written and opened."""

from __future__ import annotations

import threading

from textual.widgets import DataTable

from tests.fakes.ui_sources import FakeController
from tests.test_app import lab_app, screen_text, sync, until
from tfctl.tui.app.history import RunsScreen


@sync
async def test_h_lists_past_runs_and_enter_opens_the_selected_runs_report() -> None:
    written: list[str] = []
    opened: list[str] = []
    thread_ids: list[int] = []

    def reporter(run_id: str) -> str:
        thread_ids.append(threading.get_ident())  # blocking work: never the app's thread
        written.append(run_id)
        return f"/tmp/runs/{run_id}/report/report.html"

    app, ctl, _ = lab_app(FakeController(), reporter=reporter, opener=opened.append)
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.press("h")
        await until(pilot, lambda: isinstance(app.screen, RunsScreen)
                    and app.screen.query_one(DataTable).row_count == 2)
        text = screen_text(app)
        assert "2026-11-21-1800" in text and "exit 1: chief:0 ended" in text
        assert "running" in text  # the current run
        await pilot.press("down", "enter")
        await until(pilot, lambda: opened != [])
        assert written == ["2026-11-21-1800"]
        assert opened == ["/tmp/runs/2026-11-21-1800/report/report.html"]
        assert thread_ids and thread_ids[0] != threading.get_ident()
        await pilot.press("escape")
        await until(pilot, lambda: not isinstance(app.screen, RunsScreen))
    assert ctl.called("runs")


@sync
async def test_a_failed_report_is_said_and_the_screen_stays() -> None:
    def reporter(run_id: str) -> str:
        raise OSError("rsync: connection refused")

    app, _, _ = lab_app(FakeController(), reporter=reporter, opener=lambda page: None)
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.press("h")
        await until(pilot, lambda: isinstance(app.screen, RunsScreen)
                    and app.screen.query_one(DataTable).row_count == 2)
        await pilot.press("enter")
        screen = app.screen
        assert isinstance(screen, RunsScreen)
        await until(pilot, lambda: screen.status_text == "report of 2026-11-22-0931 failed: "
                                                         "rsync: connection refused")
        assert app.screen is screen
