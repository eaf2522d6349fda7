"""Busy GPUs on the lab, from both front ends: `tfctl up` refuses (exit 1, the holder named) and
the dashboard's `u` refuses the same way, names the holder in its dialog, and launches only when
told to (`UpOptions(force=True)`, as `tfctl up --force`).

The GPUs are the test-only nvidia-smi stand-in's (tests/support/fakes), as in
tests/testbed/test_gpu_busy.py:
a process counts as a GPU user when its CUDA_VISIBLE_DEVICES names the GPU, so a `sleep` with a
mask plays a colleague's job.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from textual.pilot import Pilot

from tests.support.testbed.testbed import Testbed
from tests.support.testbedtools import FOREVER, job_dir, processes_of_run, tfctl
from tests.testbed.test_gpu_busy import gpu_lab, stranger  # noqa: F401  # the fixtures
from tfctl.inventory.load import load_inventory
from tfctl.remote.runs.controller import RunController
from tfctl.tui.app.app import TfctlApp
from tfctl.tui.app.dialogs import ConfirmScreen
from tfctl.tui.app.factory import make_app
from tfctl.tui.app.widgets.tasks import TasksTable

pytestmark = pytest.mark.testbed

FAST = {"gpu_refresh_s": 0.5, "task_refresh_s": 0.5, "log_refresh_s": 0.5}


async def until(pilot: Pilot[None], condition: Callable[[], bool], timeout_s: float = 60.0
                ) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        await pilot.pause(0.1)


def screen_text(app: TfctlApp) -> str:
    return "\n".join("".join(seg.text for seg in strip)
                     for strip in app.screen._compositor.render_strips())


def test_cli_and_dashboard_refuse_a_busy_gpu_and_the_dashboard_launches_when_told(
        gpu_lab: Testbed, tmp_path: Path, stranger: int) -> None:  # noqa: F811
    inv_path = gpu_lab.write_inventory(job_dir(tmp_path) / "cluster.yaml", FOREVER,
                                       hosts=["h1", "h2"], gpus={"h1": [1], "h2": [0]},
                                       ps={"h1": 1, "h2": 0})
    holder = f"h2: GPU 0: pid {stranger} (user {gpu_lab.user}, 1500 MiB, sleep 300)"
    state_file = inv_path.parent / ".tfctl-state-lab.json"
    inv = load_inventory(inv_path)
    controller = RunController(inv)
    app = make_app(controller, None, **FAST)
    notes: list[tuple[str, str]] = []
    original = app.notify

    def notify(message: str, **kw):  # type: ignore[no-untyped-def]
        notes.append((kw.get("title", ""), message))
        original(message, **kw)

    app.notify = notify  # type: ignore[method-assign]

    before: str | None = None

    async def dashboard() -> str:
        async with app.run_test(size=(160, 48)) as pilot:
            await pilot.press("u")
            await until(pilot, lambda: isinstance(app.screen, ConfirmScreen)
                        or any(title == "Up failed" for title, _ in notes))
            assert isinstance(app.screen, ConfirmScreen), notes
            assert holder in app.screen.question
            await until(pilot, lambda: "Launch anyway?" in screen_text(app), timeout_s=10)
            text = screen_text(app)
            assert holder in text and "Free GPUs instead: h2: 1" in text, text
            assert "Launch anyway?" in text
            assert not state_file.exists()  # nothing started, nothing remembered
            assert not any(title == "Up" for title, _ in notes)
            await pilot.press("y")
            await until(pilot, lambda: any(title in ("Up", "Up failed") for title, _ in notes),
                        timeout_s=120)
            assert ("Up", f"Started run {controller.run_id}.") in notes, notes
            await until(pilot, lambda: {r.state for r in app.query_one(TasksTable).rows}
                        == {"running"}, timeout_s=60)
            run_id = controller.run_id
            assert run_id is not None and run_id != before and state_file.exists()
            await pilot.press("q")
            return run_id

    try:
        refused = tfctl(inv_path, "up")
        assert refused.returncode == 1, refused.stdout + refused.stderr
        assert holder in refused.stderr and "free GPUs instead: h2: 1" in refused.stderr
        assert not state_file.exists()

        before = controller.run_id  # a run an earlier test left on the lab hosts, or None
        run_id = asyncio.run(asyncio.wait_for(dashboard(), timeout=240))
        masks = {env["TFCTL_TASK"]: env["CUDA_VISIBLE_DEVICES"]
                 for env in processes_of_run(run_id).values()}
        assert masks == {"ps:0": "", "worker:0": "1", "worker:1": "0"}
    finally:
        tfctl(inv_path, "down", "--grace", "1")
        controller.close()
