"""The dashboard's past runs (`h`): listed from the hosts, a run's report written and opened;
the lab (`L`): who holds which GPU, as `tfctl lab` shows it."""

from __future__ import annotations

import threading

from textual.widgets import DataTable

from tests.support.fakes.ui_sources import FakeController
from tests.support.pilot import fakes_app, screen_text, sync, until
from tfctl.tui.app.history import RunsScreen
from tfctl.tui.app.labview import LabScreen


@sync
async def test_h_lists_past_runs_and_enter_opens_the_selected_runs_report() -> None:
    written: list[str] = []
    opened: list[str] = []
    thread_ids: list[int] = []

    def reporter(run_id: str) -> str:
        thread_ids.append(threading.get_ident())  # blocking work: never the app's thread
        written.append(run_id)
        return f"/tmp/runs/{run_id}/report/report.html"

    app, ctl, _ = fakes_app(FakeController(), reporter=reporter, opener=opened.append)
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

    app, _, _ = fakes_app(FakeController(), reporter=reporter, opener=lambda page: None)
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


@sync
async def test_L_shows_the_lab_as_tfctl_lab_does_and_r_reads_again() -> None:
    app, ctl, _ = fakes_app(FakeController())
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.press("L")
        await until(pilot, lambda: isinstance(app.screen, LabScreen)
                    and app.screen.query_one(DataTable).row_count == 6)
        screen = app.screen
        assert isinstance(screen, LabScreen)
        text = screen_text(app)
        assert "run 2026-11-25-0900 (job mnist) worker:0" in text and "ICML runs" in text
        table = screen.query_one(DataTable)
        rows = [" | ".join(map(str, table.get_row_at(i))) for i in range(table.row_count)]
        assert [r.split(" | ")[:3] for r in rows] == [
            ["titan", "0", "held"], ["titan", "1", "reserved"], ["titan", "2", "held"],
            ["titan", "3", "free"], ["gtx970", "0", "free"], ["old-box", "–", "error"]]
        assert rows[2].endswith("idle 40 min") and "carol | pid 3131" in rows[2]
        assert rows[3].endswith("stale claim: alice's run 2026-11-24-2200 (its processes are "
                                "gone)")
        assert "no nvidia-smi on the PATH there" in rows[5]
        assert screen.status_text == "2 free, 1 reserved, 2 held"
        await pilot.press("r")
        await until(pilot, lambda: len(ctl.called("lab")) == 2)
        await pilot.press("escape")
        await until(pilot, lambda: not isinstance(app.screen, LabScreen))
