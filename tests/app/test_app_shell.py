"""The dashboard's `x` through Pilot: which host or task it opens, that the
app suspends around the session and comes back, and what it says when it cannot. The session
itself on a real terminal and host: tests/testbed/test_ssh.py (tmux)."""

from __future__ import annotations

from typing import Any

from tests.support.pilot import fakes_app, polled_app, sync, until
from tfctl.tui.app.app import TfctlApp
from tfctl.tui.app.widgets.cluster import ClusterView


def suspendable(app: TfctlApp, log: list[str]) -> None:
    """Let the headless driver do what a terminal's does on `App.suspend` (recorded)."""
    driver: Any = app._driver
    type(driver).can_suspend = property(lambda self: True)  # undone by `restore`
    driver.suspend_application_mode = lambda: log.append("suspended")
    driver.resume_application_mode = lambda: log.append("resumed")


def restore(app: TfctlApp) -> None:
    driver_class: Any = type(app._driver)
    if "can_suspend" in vars(driver_class):
        del driver_class.can_suspend


@sync
async def test_x_opens_the_selected_task_then_the_host_under_the_cursor() -> None:
    log: list[str] = []

    def shell(target: str) -> int:
        log.append(f"shell {target}")
        return 3

    app, _, notes = fakes_app(shell=shell)
    try:
        async with polled_app(app) as pilot:
            suspendable(app, log)
            first = app.tasks_table.selected_task
            assert first is not None
            await pilot.press("x")
            await until(pilot, lambda: "resumed" in log)
            assert log == ["suspended", f"shell {first}", "resumed"]
            assert ("Shell", f"The shell on {first} ended (exit 3).", "information") in notes
            log.clear()
            app.query_one(ClusterView).focus()
            await pilot.press("down")
            await pilot.pause()
            await pilot.press("x")
            await until(pilot, lambda: "resumed" in log)
            assert log == ["suspended", "shell gtx970", "resumed"]
    finally:
        restore(app)


@sync
async def test_x_where_the_terminal_cannot_be_handed_over_says_so() -> None:
    called: list[str] = []
    def shell(target: str) -> int:
        called.append(target)
        return 0

    app, _, notes = fakes_app(shell=shell)
    async with polled_app(app) as pilot:
        await pilot.press("x")
        await until(pilot, lambda: any(title == "Shell" for title, _, _ in notes))
    assert not called
    assert any("cannot hand over" in text and "tfctl ssh" in text for _, text, _ in notes)


@sync
async def test_x_names_the_hosts_error_in_one_line() -> None:
    log: list[str] = []

    def shell(target: str) -> int:
        from tfctl.remote.errors import HostUnreachable

        raise HostUnreachable("old-box", "10.0.0.9:22 unreachable: no answer within 5 s")

    app, _, notes = fakes_app(shell=shell)
    try:
        async with polled_app(app) as pilot:
            suspendable(app, log)
            await pilot.press("x")
            await until(pilot, lambda: any(sev == "error" for _, _, sev in notes))
        assert log == ["suspended", "resumed"]  # the app came back after the failure
        assert any("no answer within 5 s" in text for _, text, sev in notes if sev == "error")
    finally:
        restore(app)
