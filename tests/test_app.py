"""The dashboard: its pure view model, and the app driven by Pilot over the fakes.

The fakes (tests/fakes/ui_sources.py) hold the DASHBOARD.md situation and record every call, so
each test checks what the user sees *and* what the app asked of the controller.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Coroutine
from dataclasses import replace
from typing import Any

import pytest
from textual.pilot import Pilot
from textual.widgets import Log

from tests.fakes.ui_sources import (
    GTX970_GPU,
    TITAN_GPUS,
    FakeController,
    FakeTelemetry,
    FakeTunnel,
    failing_sync,
    lab_findings,
    lab_inventory,
)
from tfctl.remote.gpus.history import HostTelemetry
from tfctl.remote.gpus.nvsmi import GpuProcess
from tfctl.remote.runs.status import TaskStatus
from tfctl.tui.app.app import TfctlApp
from tfctl.tui.app.dialogs import ConfirmScreen, HelpScreen
from tfctl.tui.app.model import cells
from tfctl.tui.app.model.board import Board
from tfctl.tui.app.model.hostlines import GpuLine, build_host_lines, host_state
from tfctl.tui.app.model.logbuffer import LogBuffer, LogView
from tfctl.tui.app.sources import Finding
from tfctl.tui.app.widgets.cluster import ClusterView, gpu_text
from tfctl.tui.app.widgets.header import builtin_findings, merge_findings
from tfctl.tui.app.widgets.tasks import TasksTable

FAST = {"gpu_refresh_s": 0.1, "task_refresh_s": 0.1, "log_refresh_s": 0.1}


def sync(test: Callable[[], Coroutine[Any, Any, None]]) -> Callable[[], None]:
    """Run an async Pilot test with asyncio (no pytest async plugin needed)."""

    def run() -> None:
        asyncio.run(asyncio.wait_for(test(), timeout=60))

    run.__name__ = test.__name__
    run.__doc__ = test.__doc__
    return run


# -- pure pieces ---------------------------------------------------------------------------------
@pytest.mark.parametrize(("line", "rate"), [
    ("step 10 loss 0.4 steps_per_sec=41.2", 41.2),
    ("steps_per_second: 7", 7.0),
    ("epoch 1: 12.5 steps/s", 12.5),
    ("INFO:tensorflow:global_step/sec: 3.25", 3.25),
    ("step 1180, loss = 0.42 (2580.3 examples/sec; 0.050 sec/batch)", 20.0),
    ("loss = 0.42", None),
    ("0.000 sec/batch", None),
])
def test_steps_per_sec_reads_the_rates_training_scripts_print(line: str,
                                                               rate: float | None) -> None:
    assert cells.steps_per_sec(line) == pytest.approx(rate) if rate else \
        cells.steps_per_sec(line) is None


def test_cells_say_na_for_missing_values_never_zero() -> None:
    assert cells.power_w(None) == "n/a"
    assert cells.power_w(0.0) == "0W"
    assert cells.temp_c(None) == "n/a"
    assert cells.pct(None).strip() == "n/a"
    assert cells.mem_gib(3789, 4096) == "3.7/4.0G"
    assert cells.bar(None, 5) == "     "
    assert cells.bar(1.0, 4) == "████"
    assert cells.bar(0.001, 4).startswith("▏")
    assert len(cells.bar(0.37, 9)) == 9
    assert cells.sparkline([0, None, 100], 5) == "  ▁ █"
    assert cells.duration(761) == "12:41"
    assert cells.duration(3600 + 125) == "1:02:05"
    assert cells.duration(None) == "–"


def test_owner_label_names_our_task_a_foreign_pid_or_idle() -> None:
    uuid = TITAN_GPUS[0].uuid
    tel = HostTelemetry("titan", TITAN_GPUS, (GpuProcess(uuid, 1001, 100.0, "/usr/bin/python3"),
                                              GpuProcess(TITAN_GPUS[1].uuid, 4242, None, "bob")))
    assert cells.owner_label(tel, uuid, {1001: "worker:0"}) == "worker:0"
    assert cells.owner_label(tel, TITAN_GPUS[1].uuid, {1001: "worker:0"}) == \
        "foreign pid 4242 bob"
    assert cells.owner_label(tel, TITAN_GPUS[2].uuid, {}) == "idle"
    assert cells.owner_label(tel, uuid, {}, known=False) == "pid 1001 python3"


def test_gpu_line_shows_na_power_and_fits_the_width() -> None:
    line = GpuLine(0, GTX970_GPU.uuid, "GTX 970", 83, 3789, 4096, 78, None, (40.0, 83.0),
                   "worker:4", "warning", False)
    for width in (60, 80, 120):
        text = gpu_text(line, width)
        assert text.cell_len <= width
        assert " n/a " in text.plain and "0W" not in text.plain
        assert "3.7/4.0G" in text.plain and "worker:4" in text.plain and "⚠" in text.plain


def test_board_marks_unreachable_hosts_and_keeps_plan_order() -> None:
    ctl = FakeController()
    board = Board(ctl.plan)
    board.set_run(ctl.current())
    for host, tasks in ctl.tasks.items():
        board.host_polled(host, tasks, 100.0)
    board.host_failed("old-box", "timed out", "unreachable", 101.0)
    board.host_failed("old-box", "timed out", "unreachable", 105.0)
    rows = {r.name: r for r in board.task_rows(110.0, restart_max={"worker": 3})}
    assert [r.name for r in board.task_rows(110.0)] == [t.name for t in ctl.plan.tasks]
    assert rows["ps:2"].state == "unreachable"
    assert rows["worker:2"].state == "exited 1" and rows["worker:2"].restarts == "3/3"
    assert rows["worker:0"].rate == "41.2"
    assert rows["worker:0"].up == cells.duration(758 + 10)  # uptime advances with the clock
    assert board.link("old-box").bad_since_s == 101.0  # since the first failure, not the last
    state, level = host_state(board.link("old-box"), None, 110.0, 0.0, None)
    assert state.startswith("unreachable since") and "timed out" in state and level == "down"
    assert [f.host for f in builtin_findings(board)] == ["old-box", "titan"]


def test_board_asks_to_close_the_run_once_every_worker_ended() -> None:
    ctl = FakeController(unreachable={})
    board = Board(ctl.plan)
    board.set_run(ctl.current())
    for host in ctl.run_hosts:
        board.host_polled(host, ctl.tasks.get(host, ()), 1.0)
    assert not board.should_finalize()
    ended = {h: tuple(replace(t, state="exited", exit_code=0) if t.type == "worker" else t
                      for t in ts) for h, ts in ctl.tasks.items()}
    for host in ctl.run_hosts:
        board.host_polled(host, ended.get(host, ()), 2.0)
    assert board.should_finalize()
    board.finalize_requested = board.run_id
    assert not board.should_finalize()


def test_host_state_says_not_answering_for_a_hung_poll_and_stale_telemetry() -> None:
    ctl = FakeController()
    board = Board(ctl.plan)
    board.poll_started("titan", 100.0)
    assert host_state(board.link("titan"), None, 103.0, 0.0, None)[1] == "ok"
    assert host_state(board.link("titan"), None, 106.0, 0.0, None) == \
        ("not answering for 6 s", "stale")
    old = HostTelemetry("gtx970", (GTX970_GPU,), last_sample_at=10.0)
    assert host_state(None, old, 0.0, 30.0, None) == ("stale: last sample 20 s ago", "stale")
    lines = build_host_lines(lab_inventory().hosts, {}, {"gtx970": old}, None,
                             lambda h, u: "idle", [], {}, 0.0, 30.0)
    assert [g.dim for g in lines[1].gpus] == [True]


def test_log_view_filters_one_task_or_all_with_prefixes() -> None:
    buf = LogBuffer()
    buf.add([("worker:0", "step 1"), ("worker:10", "step 2 OOM"), ("ps:0", "listening")])
    assert buf.render(LogView("worker:10")) == ["step 2 OOM"]
    assert buf.render(LogView(None, "oom")) == ["worker:10 │ step 2 OOM"]
    assert buf.render(LogView(None, "worker:0")) == ["worker:0  │ step 1"]
    assert len(buf.render(LogView())) == 3


def test_merge_findings_keeps_the_apps_own_only_when_they_say_something_new() -> None:
    own = [Finding("error", "old-box unreachable", "old-box"),
           Finding("warning", "worker:2 exited 1", "titan", task="worker:2"),
           Finding("warning", "worker:9 exited 2", "titan", task="worker:9")]
    merged = merge_findings(lab_findings(), own)
    assert [f.text for f in merged[3:]] == ["worker:9 exited 2"]


# -- the app, driven -----------------------------------------------------------------------------
def make_app(controller: FakeController | None = None, **kw: object
             ) -> tuple[TfctlApp, FakeController, list[tuple[str, str, str]]]:
    ctl = controller or FakeController()
    options: dict[str, object] = {"findings": lab_findings, "tunnel": FakeTunnel(), **FAST}
    options.update(kw)
    app = TfctlApp(lab_inventory(), ctl, FakeTelemetry(), **options)  # type: ignore[arg-type]
    notes: list[tuple[str, str, str]] = []
    original = app.notify

    def notify(message: str, *, title: str = "", severity: str = "information",
               timeout: float | None = None, markup: bool = True) -> None:
        notes.append((title, message, severity))
        original(message, title=title, severity=severity,  # type: ignore[arg-type]
                 timeout=timeout, markup=markup)

    app.notify = notify  # type: ignore[method-assign]
    return app, ctl, notes


async def until(pilot: Pilot[None], condition: Callable[[], bool], timeout_s: float = 15.0
                ) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        await pilot.pause(0.02)


def polled(app: TfctlApp) -> bool:
    return all(app.board.link(h).polled_at_s is not None or app.board.link(h).error
               for h in ("titan", "gtx970", "old-box")) and len(app.logs) > 0


def screen_text(app: TfctlApp) -> str:
    return "\n".join("".join(seg.text for seg in strip)
                     for strip in app.screen._compositor.render_strips())


@sync
async def test_cluster_view_shows_each_gpu_its_owner_and_the_dead_host() -> None:
    app, _, _ = make_app()
    async with app.run_test(size=(160, 48)) as pilot:
        await until(pilot, lambda: polled(app) and "worker:0 " in screen_text(app).split("\n")[3])
        hosts = {h.name: h for h in app.query_one(ClusterView).hosts}
        assert [g.owner for g in hosts["titan"].gpus] == ["worker:0", "worker:1", "idle",
                                                          "worker:3"]
        assert hosts["titan"].gpus[2].mark == "warning"
        assert hosts["gtx970"].gpus[0].power_w is None
        assert hosts["old-box"].level == "down"
        text = screen_text(app)
        assert "unreachable since" in text and "(timed out)" in text
        assert " n/a " in text and "11.2/12.0G" in text and "3.7/4.0G" in text
        assert "idle while its peers are busy" in text


@sync
async def test_job_view_lists_every_task_with_state_rate_and_restarts() -> None:
    app, _, _ = make_app()
    async with app.run_test(size=(160, 48)) as pilot:
        await until(pilot, lambda: polled(app))
        await until(pilot, lambda: app.query_one(TasksTable).row("worker:2").state != "waiting"
                    and app.query_one(TasksTable).row("ps:2").state == "unreachable")
        table = app.query_one(TasksTable)
        row = {r.name: r for r in table.rows}
        assert row["worker:2"].state == "exited 1" and row["worker:2"].restarts == "3/3"
        assert row["worker:0"].rate == "41.2" and row["worker:4"].rate == "18.3 ⚠"
        assert row["ps:2"].state == "unreachable"
        lines = screen_text(app).splitlines()
        assert any("worker:2" in ln and "exited 1" in ln and "Resource" in ln for ln in lines)


@sync
async def test_logs_follow_switch_task_and_filter() -> None:
    app, ctl, _ = make_app()
    async with app.run_test(size=(160, 48)) as pilot:
        await until(pilot, lambda: polled(app))
        log = app.query_one("#log", Log)
        assert log.line_count == 6  # the run marker and the 5 tail lines
        ctl.add_log("worker:3", "step 1200 steps_per_sec=39.0")
        await until(pilot, lambda: log.line_count == 7)
        assert log.lines[-1].startswith("worker:3")
        table = app.query_one(TasksTable)
        table.focus()
        table.move_cursor(row=[t.name for t in ctl.plan.tasks].index("worker:2"))
        await pilot.press("enter")
        await until(pilot, lambda: log.line_count == 2)
        assert "OOM" in log.lines[-1] and app.log_view.task == "worker:2"
        await pilot.press("a")
        await until(pilot, lambda: log.line_count == 7)
        await pilot.press("slash")
        for key in "OOM":
            await pilot.press(key)
        await until(pilot, lambda: log.line_count == 1)
        await pilot.press("enter")
        assert app.log_view.filter == "OOM"


@sync
async def test_up_and_sync_run_in_workers_and_report_in_the_past_tense() -> None:
    app, ctl, notes = make_app(FakeController(with_run=False))
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.pause(0.2)
        assert "no run" in screen_text(app)
        await pilot.press("u")
        await until(pilot, lambda: any(n[0] == "Up" for n in notes))
        assert ("Up", "Started run 2026-11-22-1000.", "information") in notes
        await until(pilot, lambda: app.board.run_id == "2026-11-22-1000")
        await until(pilot, lambda: "running 12:41" in screen_text(app))
        await pilot.press("s")
        await until(pilot, lambda: any(n[0] == "Sync" for n in notes))
        assert ctl.called("up") and ctl.called("sync")


@sync
async def test_a_failed_action_is_a_titled_error_with_its_cause() -> None:
    app, ctl, notes = make_app()
    ctl.fail["sync"] = failing_sync()
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.press("s")
        await until(pilot, lambda: any(n[0] == "Sync failed" for n in notes))
        _, cause, severity = next(n for n in notes if n[0] == "Sync failed")
        assert severity == "error"
        assert "gtx970" in cause and "exited 23" in cause and "No space left" in cause
        assert app.busy is None


@sync
async def test_down_asks_first_and_does_nothing_when_declined() -> None:
    app, ctl, notes = make_app()
    async with app.run_test(size=(160, 48)) as pilot:
        await until(pilot, lambda: polled(app))
        await pilot.press("d")
        assert isinstance(app.screen, ConfirmScreen)
        await pilot.press("n")
        await pilot.pause(0.2)
        assert not ctl.called("down")
        await pilot.press("d")
        await pilot.press("y")
        await until(pilot, lambda: any(n[0] == "Down" for n in notes))
        assert ctl.called("down") == [("down", "10.0")]
        words = next(n[1] for n in notes if n[0] == "Down")
        assert words.startswith("Stopped 7 task(s)") and "old-box" in words
        await until(pilot, lambda: app.query_one(TasksTable).row("ps:0").state == "stopped")


@sync
async def test_restart_asks_then_restarts_the_selected_task() -> None:
    app, ctl, notes = make_app()
    async with app.run_test(size=(160, 48)) as pilot:
        await until(pilot, lambda: polled(app))
        table = app.query_one(TasksTable)
        table.focus()
        table.move_cursor(row=[t.name for t in ctl.plan.tasks].index("worker:2"))
        await pilot.press("r")
        assert isinstance(app.screen, ConfirmScreen)
        assert "worker:2" in app.screen.question
        await pilot.press("y")
        await until(pilot, lambda: ctl.called("restart_task") == [("restart_task", "worker:2")])
        await until(pilot, lambda: ("Restart worker:2", "Restarted worker:2.", "information")
                    in notes)


@sync
async def test_tunnel_opens_shows_its_url_and_closes() -> None:
    tunnel = FakeTunnel("http://127.0.0.1:6007")
    app, _, _ = make_app(tunnel=tunnel)
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.press("t")
        await until(pilot, lambda: "http://127.0.0.1:6007" in screen_text(app))
        await pilot.press("t")
        await until(pilot, lambda: tunnel.calls == ["open", "close"])
        await until(pilot, lambda: "6007" not in screen_text(app).splitlines()[0])


@sync
async def test_tunnel_missing_is_said_not_crashed() -> None:
    app, _, notes = make_app(tunnel=None)
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.press("t")
        assert notes[-1][0] == "Tunnel not available" and notes[-1][2] == "warning"


@sync
async def test_help_and_quit_and_view_keys() -> None:
    app, _, _ = make_app()
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        await pilot.press("escape")
        assert not isinstance(app.screen, HelpScreen)
        await pilot.press("l")
        assert app.screen.has_class("-view-logs") and not app.query_one("#top").display
        assert app.query_one("#log", Log).has_focus
        await pilot.press("g")
        assert app.query_one("#top").display and app.query_one(TasksTable).has_focus
        await pilot.press("q")
    assert isinstance(app.telemetry, FakeTelemetry)
    assert app.telemetry.calls == ["start", "stop"]


@sync
async def test_quitting_mid_action_asks_first() -> None:
    app, ctl, notes = make_app(FakeController(delays_s={"up": 0.5}))
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.press("u")
        await until(pilot, lambda: bool(ctl.called("up")))
        await pilot.press("q")
        assert isinstance(app.screen, ConfirmScreen) and "“up” is still running" in \
            app.screen.question
        await pilot.press("n")
        assert app.is_running
        await until(pilot, lambda: any(n[0] == "Up" for n in notes))
        await pilot.press("q")
        await until(pilot, lambda: not app.is_running)


@sync
async def test_narrow_terminal_collapses_hosts_and_tabs_tasks_and_logs() -> None:
    app, _, _ = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await until(pilot, lambda: polled(app) and "worst GPU 2" in screen_text(app))
        text = screen_text(app)
        assert "titan      4 GPUs avg" in text and "11.2/12.0G" not in text
        assert app.query_one(TasksTable).display and not app.query_one("#logs").display
        await pilot.press("l")
        assert app.query_one("#logs").display and not app.query_one(TasksTable).display
        await pilot.press("F")
        assert "idle while its peers are busy" in screen_text(app)


@sync
async def test_focusing_a_host_filters_the_tasks_and_unfolds_it() -> None:
    app, _, _ = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await until(pilot, lambda: polled(app))
        cluster = app.query_one(ClusterView)
        cluster.focus()
        await pilot.press("down", "enter")
        await until(pilot, lambda: app.query_one(TasksTable).row_count == 2)
        assert app.focus_host == "gtx970"
        assert "3.7/4.0G" in screen_text(app)
        await pilot.press("escape")
        await until(pilot, lambda: app.query_one(TasksTable).row("worker:2").state != "waiting"
                    and app.query_one(TasksTable).row("ps:2").state == "unreachable")


@sync
async def test_a_slow_host_delays_nobody_and_polls_never_overlap() -> None:
    ctl = FakeController(delays_s={"old-box": 1.5})
    app, _, _ = make_app(ctl)
    async with app.run_test(size=(160, 48)) as pilot:
        await until(pilot, lambda: ctl.called("host_status").count(("host_status", "titan")) >= 4)
        # titan answered four times while old-box's first poll is still in flight: asked once,
        # not answered yet, and not asked again on top of it.
        assert ctl.called("host_status").count(("host_status", "old-box")) == 1
        assert app.board.link("old-box").error is None
        assert app.board.link("old-box").in_flight_since_s is not None
        await until(pilot, lambda: app.board.link("old-box").error_kind == "unreachable")


@sync
async def test_a_host_that_comes_back_is_ok_again() -> None:
    ctl = FakeController()
    app, _, _ = make_app(ctl)
    async with app.run_test(size=(160, 48)) as pilot:
        await until(pilot, lambda: app.board.link("old-box").error_kind == "unreachable")
        ctl.unreachable.clear()
        ctl.tasks["old-box"] = (TaskStatus("ps:2", "old-box", "running", pid=7, uptime_s=5.0),)
        assert isinstance(app.telemetry, FakeTelemetry)
        app.telemetry.errors.clear()
        def old_box() -> str:
            return next(line for line in screen_text(app).splitlines() if "old-box  192" in line)

        def level() -> str:
            return next(h.level for h in app.query_one(ClusterView).hosts if h.name == "old-box")

        await until(pilot, lambda: level() == "ok")
        assert "unreachable" not in old_box() and "ok" in old_box()
        assert "(1 down)" not in screen_text(app).splitlines()[0]


@sync
async def test_an_ended_job_is_closed_once_through_status() -> None:
    ctl = FakeController(unreachable={})
    ctl.tasks = {h: tuple(replace(t, state="exited", exit_code=0) if t.type == "worker" else t
                          for t in ts) for h, ts in ctl.tasks.items()}
    app, _, _ = make_app(ctl)
    async with app.run_test(size=(160, 48)) as pilot:
        await until(pilot, lambda: len(ctl.called("status")) == 1)
        await pilot.pause(0.3)
        assert len(ctl.called("status")) == 1


def test_the_ui_is_not_imported_by_headless_commands() -> None:
    import subprocess
    import sys

    code = ("import sys; from tfctl.tui.cli.main import main; import tfctl.tui.cli.ui, "
            "tfctl.tui.cli.run; print('textual' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "False"
