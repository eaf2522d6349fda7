"""The dashboard on the real lab: `up` and `down` from the UI, a host cut off and healed, and
`tfctl ui` in a real terminal (tmux)."""

from __future__ import annotations

import asyncio
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.testbedtools import FOREVER_FLAGS, job_dir, processes_of_run
from tests.support.tmuxpane import Pane
from tfctl.inventory.load import load_inventory
from tfctl.remote.controller import RunController
from tfctl.tui.app.app import TfctlApp
from tfctl.tui.app.factory import make_app
from tfctl.tui.app.widgets.cluster import ClusterView
from tfctl.tui.app.widgets.tasks import TasksTable

pytestmark = pytest.mark.testbed

FAST = {"gpu_refresh_s": 0.5, "task_refresh_s": 0.5, "log_refresh_s": 0.5}


async def until(pilot, condition: Callable[[], bool], timeout_s: float = 30.0) -> float:  # type: ignore[no-untyped-def]
    """Wait (letting the app run) until `condition` holds; return the seconds it took."""
    start = time.monotonic()
    while not condition():
        if time.monotonic() - start > timeout_s:
            raise AssertionError("condition not reached in time")
        await pilot.pause(0.1)
    return time.monotonic() - start


def host_level(app: TfctlApp, host: str) -> str:
    return next(h.level for h in app.query_one(ClusterView).hosts if h.name == host)


def states(app: TfctlApp) -> dict[str, str]:
    return {r.name: r.state for r in app.query_one(TasksTable).rows}


def test_up_and_down_from_the_ui_follow_the_real_state(testbed, tmp_path: Path, healed) -> None:  # type: ignore[no-untyped-def]
    inv = load_inventory(testbed.write_inventory(job_dir(tmp_path) / "cluster.yaml", FOREVER_FLAGS))
    controller = RunController(inv)
    app = make_app(controller, None, **FAST)

    async def scenario() -> None:
        async with app.run_test(size=(160, 48)) as pilot:
            await pilot.press("u")
            # Each host's panel fills when that host is first polled ("waiting" until then).
            await until(pilot, lambda: controller.run_id is not None and set(
                states(app).values()) == {"running"}, timeout_s=60)
            run_id = controller.run_id
            assert run_id is not None
            real = {env["TFCTL_TASK"] for env in processes_of_run(run_id).values()}
            assert real == {"ps:0", "ps:1", "ps:2", "worker:0", "worker:1", "worker:2"}
            assert set(states(app).values()) == {"running"}
            # A host cut off mid-run: its panel says so within 5 s, the others keep updating.
            testbed.cut("h3")
            took = await until(pilot, lambda: host_level(app, "h3") == "down", timeout_s=15)
            assert took <= 5.0 + FAST["task_refresh_s"] + 1.0, took
            assert host_level(app, "h1") == "ok" and states(app)["worker:0"] == "running"
            testbed.heal("h3")
            await until(pilot, lambda: host_level(app, "h3") == "ok", timeout_s=30)
            await pilot.press("d")
            await pilot.press("y")
            await until(pilot, lambda: not processes_of_run(run_id), timeout_s=60)
            await until(pilot, lambda: set(states(app).values()) <= {"stopped", "exited",
                                                                    "killed"}, timeout_s=30)
            await pilot.press("q")

    try:
        asyncio.run(asyncio.wait_for(scenario(), timeout=240))
    finally:
        with RunController(inv) as cleaner:  # closed: no idle agent session left on a host
            cleaner.down(grace_s=1.0)
        controller.close()


@pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux")
def test_tfctl_ui_renders_in_a_real_terminal(testbed, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    inv = testbed.write_inventory(job_dir(tmp_path) / "cluster.yaml", FOREVER_FLAGS)
    pane = Pane(f"{sys.executable} -m tfctl.tui -i {inv} ui")
    try:
        screen = pane.wait("the dashboard", lambda screen: "h3" in screen, timeout_s=30)
        for word in ("h1", "h2", "Tasks", "up"):
            assert word in screen
        pane.keys("?")
        pane.wait("the help", lambda screen: "quit" in screen, timeout_s=30)
        pane.keys("Escape")
        time.sleep(1.0)  # ESC then q at once would read as Alt+q
        pane.keys("q")
        deadline = time.monotonic() + 45  # quitting stops pollers; slow under load
        while time.monotonic() < deadline and pane.alive():
            time.sleep(0.3)
        assert not pane.alive(), f"`q` did not quit the dashboard:\n{pane.text()}"
    finally:
        pane.close()
