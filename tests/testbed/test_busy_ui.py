"""Busy GPUs on the lab, from both front ends: `tfctl up` refuses (exit 1, the holder named) and
the dashboard's `u` refuses the same way, names the holder in its dialog, and launches only when
told to (`UpOptions(force=True)`, as `tfctl up --force`).

The GPUs are the test-only nvidia-smi stand-in's (tests/support/fakes), as in
tests/testbed/test_gpu_busy.py: a process counts as a GPU user when its CUDA_VISIBLE_DEVICES
names the GPU, so a `sleep` with a mask plays a colleague's job (the `stranger` fixture).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.pilot import recorded_notes, screen_text, until
from tests.support.testbed.testbed import Testbed
from tests.support.testbedtools import FOREVER, job_dir, processes_of_run, tfctl
from tfctl.inventory.load import load_inventory
from tfctl.remote.controller import RunController
from tfctl.remote.runs.current import state_file
from tfctl.tui.app.dialogs import ConfirmScreen
from tfctl.tui.app.factory import make_app
from tfctl.tui.app.widgets.tasks import TasksTable

pytestmark = pytest.mark.testbed

FAST = {"gpu_refresh_s": 0.5, "task_refresh_s": 0.5, "log_refresh_s": 0.5}


def test_cli_and_dashboard_refuse_a_busy_gpu_and_the_dashboard_launches_when_told(
        gpu_testbed: Testbed, tmp_path: Path, stranger: Callable[..., int]) -> None:
    inv_path = gpu_testbed.write_inventory(job_dir(tmp_path) / "cluster.yaml", FOREVER,
                                           hosts=["h1", "h2"], gpus={"h1": [1], "h2": [0]},
                                           ps={"h1": 1, "h2": 0})
    holder = f"h2: GPU 0: pid {stranger('h2', 0)} (user {gpu_testbed.user}, 1500 MiB, sleep 300)"
    remembered = Path(state_file(str(inv_path), "lab"))
    inv = load_inventory(inv_path)
    controller = RunController(inv)
    app = make_app(controller, None, **FAST)
    notes = recorded_notes(app)

    before: str | None = None

    async def dashboard() -> str:
        async with app.run_test(size=(160, 48)) as pilot:
            await pilot.press("u")
            await until(pilot, lambda: isinstance(app.screen, ConfirmScreen)
                        or any(title == "Up failed" for title, _, _ in notes), 60, 0.1)
            assert isinstance(app.screen, ConfirmScreen), notes
            assert holder in app.screen.question
            await until(pilot, lambda: "Launch anyway?" in screen_text(app), 10, 0.1)
            text = screen_text(app)
            assert holder in text and "Free GPUs instead: h2: 1" in text, text
            assert "Launch anyway?" in text
            assert not remembered.exists()  # nothing started, nothing remembered
            assert not any(title == "Up" for title, _, _ in notes)
            await pilot.press("y")
            await until(pilot, lambda: any(title in ("Up", "Up failed") for title, _, _ in notes),
                        120, 0.1)
            assert ("Up", f"Started run {controller.run_id}.") in [n[:2] for n in notes], notes
            await until(pilot, lambda: {r.state for r in app.query_one(TasksTable).rows}
                        == {"running"}, 60, 0.1)
            run_id = controller.run_id
            assert run_id is not None and run_id != before and remembered.exists()
            await pilot.press("q")
            return run_id

    try:
        refused = tfctl(inv_path, "up")
        assert refused.returncode == 1, refused.stdout + refused.stderr
        assert holder in refused.stderr and "free GPUs instead: h2: 1" in refused.stderr
        assert not remembered.exists()

        before = controller.run_id  # a run an earlier test left on the lab hosts, or None
        run_id = asyncio.run(asyncio.wait_for(dashboard(), timeout=240))
        masks = {env["TFCTL_TASK"]: env["CUDA_VISIBLE_DEVICES"]
                 for env in processes_of_run(run_id).values()}
        assert masks == {"ps:0": "", "worker:0": "1", "worker:1": "0"}
    finally:
        tfctl(inv_path, "down", "--grace", "1")
        controller.close()
