"""Snapshots of the dashboard in the situation of docs/dashboard.md, at 160×48 and 80×24.

Fixed data (tests/support/fakes/ui_sources.py), a fixed wall clock and TZ=UTC, so the pictures
only change when the drawing does. Review a changed picture with `pytest --snapshot-update` and
the report.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable

import pytest
from textual.pilot import Pilot

from tests.support.fakes.ui_sources import (
    FIXED_WALL_S,
    FakeController,
    FakeTelemetry,
    FakeTunnel,
    lab_findings,
)
from tfctl.tui.app.app import TfctlApp
from tfctl.tui.app.factory import make_app

SnapCompare = Callable[..., bool]


# "unreachable since 09:42:10" is local time: the zone is pinned (tests/conftest.py `utc`).
pytestmark = pytest.mark.usefixtures("utc")


def fixed_app() -> TfctlApp:
    """The dashboard over the fakes, its wall clock stopped at FIXED_WALL_S."""
    return make_app(FakeController(), FakeTelemetry(), findings=lab_findings,
                    tunnel=FakeTunnel(), clock=lambda: FIXED_WALL_S)


async def settled(pilot: Pilot[None]) -> None:
    """Every host answered, the logs and the findings arrived, and the screen caught up."""
    app = pilot.app
    assert isinstance(app, TfctlApp)
    deadline = time.monotonic() + 10
    while not (all(app.board.link(h.name).polled_at_s is not None or app.board.link(h.name).error
                   for h in app.inventory.hosts)
               and len(app.logs) > 0 and app.injected_findings):
        assert time.monotonic() < deadline, "the fakes never answered"
        await pilot.pause(0.05)
    app.refresh_all()
    await pilot.pause(0.1)


def test_wide_dashboard(snap_compare: SnapCompare) -> None:
    assert snap_compare(fixed_app(), terminal_size=(160, 48), run_before=settled)


def test_narrow_dashboard_tasks_tab(snap_compare: SnapCompare) -> None:
    assert snap_compare(fixed_app(), terminal_size=(80, 24), run_before=settled)


def after_pressing(key: str) -> Callable[[Pilot[None]], Awaitable[None]]:
    """A snapshot's `run_before`: the dashboard settled, then `key` pressed."""

    async def run_before(pilot: Pilot[None]) -> None:
        await settled(pilot)
        await pilot.press(key)
        await pilot.pause(0.1)

    return run_before


def test_narrow_dashboard_logs_tab(snap_compare: SnapCompare) -> None:
    assert snap_compare(fixed_app(), terminal_size=(80, 24), run_before=after_pressing("l"))


def test_down_asks_first(snap_compare: SnapCompare) -> None:
    assert snap_compare(fixed_app(), terminal_size=(160, 48), run_before=after_pressing("d"))


def test_lab_view(snap_compare: SnapCompare) -> None:
    """`L`: every GPU of every host, held, reserved, idle, stale
    (tests/support/fakes/ui_sources.py)."""

    async def lab_view_shown(pilot: Pilot[None]) -> None:
        from textual.widgets import DataTable

        from tfctl.tui.app.labview import LabScreen

        await settled(pilot)
        await pilot.press("L")
        deadline = time.monotonic() + 10
        while not (isinstance(pilot.app.screen, LabScreen)
                   and pilot.app.screen.query_one(DataTable).row_count == 6):
            assert time.monotonic() < deadline, "the lab never answered"
            await pilot.pause(0.05)
        await pilot.pause(0.1)

    assert snap_compare(fixed_app(), terminal_size=(160, 48), run_before=lab_view_shown)
