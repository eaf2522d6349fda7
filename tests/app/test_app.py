"""The dashboard, built by `make_app` and driven by Pilot over the fakes (its pure view model is
tested in tests/app/test_app_model.py).

The fakes (tests/support/fakes/ui_sources.py) hold the situation of docs/dashboard.md and record
every call, so each test checks what the user sees *and* what the app asked of the controller.
"""

from __future__ import annotations

import time

from textual.widgets import Log

from tests.support.fakes.ui_sources import (
    FakeController,
    FakeTelemetry,
    FakeTunnel,
    failing_sync,
)
from tests.support.pilot import fakes_app, polled, polled_app, screen_text, sync, until
from tfctl.remote.agent.wirerecord import replace
from tfctl.remote.runs.status import TaskStatus
from tfctl.tui.app.dialogs import ConfirmScreen, HelpScreen
from tfctl.tui.app.widgets.cluster import ClusterView
from tfctl.tui.app.widgets.tasks import TasksTable


@sync
async def test_cluster_view_shows_each_gpu_its_owner_and_the_dead_host() -> None:
    app, _, _ = fakes_app()
    async with app.run_test(size=(160, 48)) as pilot:
        await until(pilot, lambda: polled(app) and "worker:0 " in screen_text(app).split("\n")[3])
        hosts = {h.name: h for h in app.query_one(ClusterView).hosts}
        assert [g.owner for g in hosts["titan"].gpus] == ["worker:0", "worker:1", "idle",
                                                          "worker:3"]
        assert hosts["titan"].gpus[2].mark == "warning"
        assert hosts["gtx970"].gpus[0].power_w is None
        assert hosts["old-box"].level == "down"
        text = screen_text(app)
        assert "unreachable since" in text and "(no answer for" in text
        assert " n/a " in text and "11.2/12.0G" in text and "3.7/4.0G" in text
        assert "idle while its peers are busy" in text


@sync
async def test_job_view_lists_every_task_with_state_rate_and_restarts() -> None:
    app, _, _ = fakes_app()
    async with polled_app(app) as pilot:
        await until(pilot, lambda: app.query_one(TasksTable).row("worker:2").state != "waiting"
                    and app.query_one(TasksTable).row("ps:2").state == "unknown")
        table = app.query_one(TasksTable)
        row = {r.name: r for r in table.rows}
        assert row["worker:2"].state == "exited 1" and row["worker:2"].restarts == "3/3"
        assert row["worker:0"].rate == "41.2" and row["worker:4"].rate == "18.3 ⚠"
        assert row["ps:2"].state == "unknown"
        lines = screen_text(app).splitlines()
        assert any("worker:2" in ln and "exited 1" in ln and "Resource" in ln for ln in lines)


@sync
async def test_logs_follow_switch_task_and_filter() -> None:
    app, ctl, _ = fakes_app()
    async with polled_app(app) as pilot:
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
async def test_the_steps_column_shows_the_speed_the_logs_state_in_each_form() -> None:
    """TF1's `global_step/sec`, Keras' `ms/step` and `examples/sec` lines followed by lines that
    state no speed (the usual case: a loss line comes last) still fill the steps/s column."""
    ctl = FakeController()
    quiet = {"worker:0": "INFO:tensorflow:loss = 0.31, step = 1300",
             "worker:1": "Epoch 3/10", "worker:3": "step 1190, loss = 0.40"}
    ctl.tasks = {h: tuple(replace(t, last_line=quiet.get(t.name, t.last_line)) for t in ts)
                 for h, ts in ctl.tasks.items()}
    ctl.log_lines = [(task, line) for task, line in ctl.log_lines if task not in quiet]
    app, _, _ = fakes_app(ctl)
    async with polled_app(app) as pilot:
        table = app.query_one(TasksTable)
        assert [table.row(t).rate for t in quiet] == ["–", "–", "–"]
        for task, line in (("worker:0", "INFO:tensorflow:global_step/sec: 149.1"),
                           ("worker:1", "100/100 ━━━━━━━━━━━━━━━━━━━━ 1s 8ms/step - loss: 0.3"),
                           ("worker:3", "step 1190, loss = 0.40 (2580.3 examples/sec)")):
            ctl.add_log(task, line)
            ctl.add_log(task, quiet[task])
        await until(pilot, lambda: table.row("worker:3").rate == "2580ex")
        assert table.row("worker:0").rate == "149.1" and table.row("worker:1").rate == "125.0"


@sync
async def test_a_host_whose_first_poll_hangs_is_not_said_to_answer() -> None:
    """The Hosts pane's "not answering for 6 s" is in the Findings pane too (one source), and
    until then the Findings pane does not say that every host answers."""
    ctl = FakeController(unreachable={}, delays_s={"titan": 30.0})
    app, _, _ = fakes_app(ctl, findings=None)
    async with app.run_test(size=(160, 48)) as pilot:
        await until(pilot, lambda: app.board.link("gtx970").polled_at_s is not None)
        findings = app.query_one("#findings")
        assert "every host answers" not in screen_text(app)
        assert "waiting for an answer from titan" in str(findings.render())
        await until(pilot, lambda: "not answering for" in screen_text(app), timeout_s=20)
        await pilot.pause(0.3)
        said = [f.text for f in app.findings]
        assert any(t.startswith("titan not answering for ") for t in said), said
        assert "every host answers" not in screen_text(app)


@sync
async def test_up_and_sync_run_in_workers_and_report_in_the_past_tense() -> None:
    app, ctl, notes = fakes_app(FakeController(with_run=False))
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


HOLDER = "titan: GPU 2: pid 4242 (user bob, 1500 MiB, python [x].py)"


@sync
async def test_up_refuses_busy_gpus_and_launches_only_when_confirmed() -> None:
    """As `tfctl up`: other processes on the plan's GPUs refuse the launch (nothing started);
    the dialog names them and the free GPUs, and only "launch anyway" forces it."""
    ctl = FakeController(with_run=False)
    ctl.busy_gpus, ctl.free_gpus = (HOLDER,), "titan: none"
    app, _, notes = fakes_app(ctl)
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.press("u")
        await until(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        assert ctl.called("up") == [("up", "force=False")] and app.busy is None
        await until(pilot, lambda: "Launch anyway?" in screen_text(app))
        text = screen_text(app)
        assert HOLDER in text  # markup-like text shown as it is
        assert "Free GPUs instead: titan: none" in text and "Launch anyway?" in text
        assert "Launch anyway (y)" in text
        await pilot.press("n")
        await until(pilot, lambda: any(n[0] == "Up" for n in notes))
        assert notes[-1][2] == "warning" and notes[-1][1].startswith("Nothing was started")
        assert ctl.called("up") == [("up", "force=False")] and app.board.run_id is None

        await pilot.press("u")
        await until(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        await pilot.press("y")
        await until(pilot, lambda: ("Up", "Started run 2026-11-22-1000.", "information")
                    in notes)
        assert ctl.called("up") == [("up", "force=False"), ("up", "force=False"),
                                    ("up", "force=True")]
        await until(pilot, lambda: app.board.run_id == "2026-11-22-1000")


@sync
async def test_up_on_free_gpus_asks_nothing() -> None:
    app, ctl, notes = fakes_app(FakeController(with_run=False))
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.press("u")
        await until(pilot, lambda: any(n[0] == "Up" for n in notes))
        assert ctl.called("up") == [("up", "force=False")]
        assert not isinstance(app.screen, ConfirmScreen)


@sync
async def test_a_failed_action_is_a_titled_error_with_its_cause() -> None:
    app, ctl, notes = fakes_app()
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
    app, ctl, notes = fakes_app()
    async with polled_app(app) as pilot:
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
    app, ctl, notes = fakes_app()
    async with polled_app(app) as pilot:
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


def _gtx970_restarted(ctl: FakeController, at_s: float) -> None:
    """gtx970 rebooted under the run: its tasks lost to the restart, the rest running."""
    with ctl.lock:
        ctl.tasks["gtx970"] = tuple(replace(t, state="lost", pid=None, uptime_s=None,
                                            host_restarted_at_s=at_s)
                                    for t in ctl.tasks["gtx970"])


@sync
async def test_restart_offers_to_start_a_task_lost_to_its_hosts_restart_again() -> None:
    app, ctl, notes = fakes_app()
    at = time.time() - 60
    _gtx970_restarted(ctl, at)
    async with polled_app(app) as pilot:
        table = app.query_one(TasksTable)
        said = f"lost (host restarted at {time.strftime('%H:%M:%S', time.localtime(at))})"
        await until(pilot, lambda: table.row("worker:4").state == said)
        table.focus()
        table.move_cursor(row=[t.name for t in ctl.plan.tasks].index("worker:4"))
        await pilot.press("r")
        assert isinstance(app.screen, ConfirmScreen)
        assert app.screen.question.startswith("Start worker:4 again?\nLost (gtx970 restarted at")
        await pilot.press("y")
        await until(pilot, lambda: ctl.called("restart") == [("restart", "worker:4")])
        assert not ctl.called("restart_task")  # a lost task is started, not stopped first
        await until(pilot, lambda: ("Restart worker:4", "Started worker:4 again on gtx970.",
                                    "information") in notes)
        await until(pilot, lambda: table.row("worker:4").state == "running")


@sync
async def test_restart_on_a_host_starts_every_task_its_restart_lost_again() -> None:
    app, ctl, notes = fakes_app()
    _gtx970_restarted(ctl, time.time() - 60)
    async with polled_app(app) as pilot:
        cluster = app.query_one(ClusterView)
        await until(pilot, lambda: any(h.name == "gtx970" for h in cluster.hosts))
        cluster.focus()
        cluster.cursor = [h.name for h in cluster.hosts].index("gtx970")
        await pilot.press("r")
        assert isinstance(app.screen, ConfirmScreen)
        assert app.screen.question.startswith("Start ps:1, worker:4 again?")
        await pilot.press("y")
        await until(pilot, lambda: ctl.called("restart") == [("restart", "gtx970")])
        await until(pilot, lambda: ("Restart gtx970", "Started ps:1, worker:4 again on gtx970.",
                                    "information") in notes)


@sync
async def test_tunnel_opens_shows_its_url_and_closes() -> None:
    tunnel = FakeTunnel("http://127.0.0.1:6007")
    app, _, _ = fakes_app(tunnel=tunnel)
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.press("t")
        await until(pilot, lambda: "http://127.0.0.1:6007" in screen_text(app))
        await pilot.press("t")
        await until(pilot, lambda: tunnel.calls == ["open", "close"])
        await until(pilot, lambda: "6007" not in screen_text(app).splitlines()[0])


@sync
async def test_tunnel_missing_is_said_not_crashed() -> None:
    app, _, notes = fakes_app(tunnel=None)
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.press("t")
        assert notes[-1][0] == "Tunnel not available" and notes[-1][2] == "warning"


@sync
async def test_help_and_quit_and_view_keys() -> None:
    app, _, _ = fakes_app()
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
    app, ctl, notes = fakes_app(FakeController(delays_s={"up": 0.5}))
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
    app, _, _ = fakes_app()
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
    app, _, _ = fakes_app()
    async with polled_app(app, (80, 24)) as pilot:
        cluster = app.query_one(ClusterView)
        cluster.focus()
        await pilot.press("down", "enter")
        await until(pilot, lambda: app.query_one(TasksTable).row_count == 2)
        assert app.focus_host == "gtx970"
        assert "3.7/4.0G" in screen_text(app)
        await pilot.press("escape")
        await until(pilot, lambda: app.query_one(TasksTable).row("worker:2").state != "waiting"
                    and app.query_one(TasksTable).row("ps:2").state == "unknown")


@sync
async def test_a_slow_host_delays_nobody_and_polls_never_overlap() -> None:
    ctl = FakeController(delays_s={"old-box": 1.5})
    app, _, _ = fakes_app(ctl)
    async with app.run_test(size=(160, 48)) as pilot:
        await until(pilot, lambda: ctl.called("host_status").count(("host_status", "titan")) >= 4)
        # titan answered four times while old-box's first poll is still in flight: asked once,
        # not answered yet, and not asked again on top of it.
        assert ctl.called("host_status").count(("host_status", "old-box")) == 1
        assert app.board.link("old-box").error is None
        assert app.board.link("old-box").in_flight_since_s is not None
        await until(pilot, lambda: app.board.link("old-box").unreachable)


@sync
async def test_a_host_that_comes_back_is_ok_again() -> None:
    ctl = FakeController()
    app, _, _ = fakes_app(ctl)
    async with app.run_test(size=(160, 48)) as pilot:
        await until(pilot, lambda: app.board.link("old-box").unreachable)
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
    app, _, _ = fakes_app(ctl)
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
