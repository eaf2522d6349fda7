"""Driving the dashboard in tests with Textual's Pilot: an async test run with asyncio, the app
built over the fakes (tests/support/fakes/ui_sources.py) with its notifications recorded, waiting
for a condition, and the screen's text."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Any

from textual.pilot import Pilot

from tests.support.fakes.ui_sources import FakeController, FakeTelemetry, FakeTunnel, lab_findings
from tfctl.tui.app.app import TfctlApp
from tfctl.tui.app.factory import make_app

FAST = {"gpu_refresh_s": 0.1, "task_refresh_s": 0.1, "log_refresh_s": 0.1}
"""The dashboard's refresh periods in tests over the fakes."""


def sync(test: Callable[[], Coroutine[Any, Any, None]]) -> Callable[[], None]:
    """Run an async Pilot test with asyncio (no pytest async plugin needed)."""

    def run() -> None:
        asyncio.run(asyncio.wait_for(test(), timeout=60))

    run.__name__ = test.__name__
    run.__doc__ = test.__doc__
    return run


def recorded_notes(app: TfctlApp) -> list[tuple[str, str, str]]:
    """Every notification the app shows from now on, as (title, message, severity)."""
    notes: list[tuple[str, str, str]] = []
    original = app.notify

    def notify(message: str, *, title: str = "", severity: str = "information",
               timeout: float | None = None, markup: bool = True) -> None:
        notes.append((title, message, severity))
        original(message, title=title, severity=severity,  # type: ignore[arg-type]
                 timeout=timeout, markup=markup)

    app.notify = notify  # type: ignore[method-assign]
    return notes


def fakes_app(controller: FakeController | None = None, **kw: object
              ) -> tuple[TfctlApp, FakeController, list[tuple[str, str, str]]]:
    """The app from the factory over the fakes, with its notifications recorded."""
    ctl = controller or FakeController()
    options: dict[str, object] = {"findings": lab_findings, "tunnel": FakeTunnel(), **FAST}
    options.update(kw)
    app = make_app(ctl, FakeTelemetry(), **options)  # type: ignore[arg-type]
    return app, ctl, recorded_notes(app)


async def until(pilot: Pilot[None], condition: Callable[[], bool], timeout_s: float = 15.0,
                every_s: float = 0.02) -> None:
    """Let the app run until `condition()` holds; an AssertionError after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        await pilot.pause(every_s)


@contextlib.asynccontextmanager
async def polled_app(app: TfctlApp, size: tuple[int, int] = (160, 48)
                     ) -> AsyncIterator[Pilot[None]]:
    """The app running headless at `size`, once every host of the fakes has answered."""
    async with app.run_test(size=size) as pilot:
        await until(pilot, lambda: polled(app))
        yield pilot


def polled(app: TfctlApp) -> bool:
    """Every host of the fakes has answered (or failed) once, and the logs have a line."""
    return all(app.board.link(h).polled_at_s is not None or app.board.link(h).error
               for h in ("titan", "gtx970", "old-box")) and len(app.logs) > 0


def screen_text(app: TfctlApp) -> str:
    """What the screen shows now, as text lines."""
    return "\n".join("".join(seg.text for seg in strip)
                     for strip in app.screen._compositor.render_strips())
