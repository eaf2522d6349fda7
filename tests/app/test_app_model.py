"""The dashboard's pure view model (tfctl.tui.app.model, no textual) and the widgets' text:
cells, the board, host lines, the log buffer, findings merging, over the fakes' fixed data
(tests/support/fakes/ui_sources.py). The app itself, driven by Pilot, is in tests/app/test_app.py.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from tests.support.fakes.ui_sources import (
    GTX970_GPU,
    TITAN_GPUS,
    FakeController,
    lab_findings,
    lab_inventory,
)
from tests.support.speed_lines import SPEED_LINES
from tfctl.remote.agent.wirerecord import replace as replace_record
from tfctl.remote.errors import HostUnreachable
from tfctl.remote.gpus.lastseen import HostTelemetry
from tfctl.remote.gpus.nvsmi import GpuProcess
from tfctl.remote.runs.status import TaskStatus
from tfctl.tui.app.model import cells
from tfctl.tui.app.model.board import Board
from tfctl.tui.app.model.hostlines import (
    GpuLine,
    build_host_lines,
    host_state,
    not_answering,
)
from tfctl.tui.app.model.logbuffer import LogBuffer, LogView
from tfctl.tui.app.sources import AppFinding
from tfctl.tui.app.widgets.cluster import gpu_text
from tfctl.tui.app.widgets.header import builtin_findings, merge_findings, no_findings_text


# -- pure pieces ---------------------------------------------------------------------------------
def _shown(value: tuple[float, str] | None) -> str:
    """What the steps/s column says for a speed: steps/s as such, examples/s marked `ex`."""
    if value is None:
        return "–"
    number, unit = value
    if unit == "examples/s":
        return f"{number:.0f}ex"
    return f"{number:.1f}" if number < 1000 else f"{number:.0f}"


@pytest.mark.parametrize(("line", "patterns", "value"), SPEED_LINES)
def test_the_steps_column_reads_every_throughput_form_the_recorder_reads(
        line: str, patterns: tuple[str, ...], value: tuple[float, str] | None) -> None:
    """The same table as the recorder's (tests/unit/test_record_throughput.py), through the board:
    a speed in the task's last line (the status poll), or in a line the log follower brought
    before later lines that state none."""
    ctl = FakeController()
    ctl.plan = replace(ctl.plan, inventory=replace(
        ctl.plan.inventory, job=replace(ctl.plan.inventory.job, throughput=patterns)))
    for source in ("last line", "log"):
        board = Board(ctl.plan)
        board.set_run(ctl.current())
        last = line if source == "last line" else "INFO:tensorflow:loss = 0.3, step = 1300"
        board.host_polled("titan", [TaskStatus("worker:0", "titan", "running", pid=1001,
                                               uptime_s=5.0, last_line=last, mask="0")], 1.0)
        if source == "log":
            board.log_lines([("worker:0", line), ("worker:0", last)])
        row = next(r for r in board.task_rows(2.0) if r.name == "worker:0")
        assert row.rate == _shown(value), source


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
    board.host_failed("old-box", "timed out", HostUnreachable, 101.0)
    board.host_failed("old-box", "timed out", HostUnreachable, 105.0)
    rows = {r.name: r for r in board.task_rows(110.0, restart_max={"worker": 3})}
    assert [r.name for r in board.task_rows(110.0)] == [t.name for t in ctl.plan.tasks]
    assert rows["ps:2"].state == "unknown"
    assert rows["worker:2"].state == "exited 1" and rows["worker:2"].restarts == "3/3"
    assert rows["worker:0"].rate == "41.2"
    assert rows["worker:0"].up == cells.duration(758 + 10)  # uptime advances with the clock
    assert board.link("old-box").bad_since_s == 101.0  # since the first failure, not the last
    state, level = host_state(board.link("old-box"), None, 110.0, 0.0, None)
    assert state.endswith("(no answer for 9 s)") and level == "down"
    assert state.startswith("unreachable since")
    assert [f.host for f in builtin_findings(board)] == ["old-box", "titan"]


def test_board_asks_to_close_the_run_once_every_worker_ended() -> None:
    ctl = FakeController(unreachable={})
    board = Board(ctl.plan)
    board.set_run(ctl.current())
    for host in ctl.run_hosts:
        board.host_polled(host, ctl.tasks.get(host, ()), 1.0)
    assert not board.should_finalize()
    ended = {h: tuple(replace_record(t, state="exited", exit_code=0) if t.type == "worker" else t
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


def test_the_findings_say_not_answering_whenever_the_hosts_pane_does() -> None:
    """One source for "answering" (hostlines.not_answering): a poll hung for 6 s in the first
    seconds of a run is a finding, and nothing says "every host answers" meanwhile."""
    ctl = FakeController(unreachable={})
    board = Board(ctl.plan)
    board.set_run(ctl.current())
    board.poll_started("titan", 100.0)
    board.host_polled("gtx970", ctl.tasks["gtx970"], 101.0)
    board.host_polled("old-box", (), 101.0)
    quiet = {h: w for h in ctl.run_hosts
             if (w := not_answering(board.link(h), None, 106.0, 0.0)) is not None}
    assert host_state(board.link("titan"), None, 106.0, 0.0, None) == quiet["titan"] == \
        ("not answering for 6 s", "stale")
    assert [(f.level, f.text) for f in builtin_findings(board, quiet)] == [
        ("warning", "titan not answering for 6 s: its tasks are not known yet")]
    assert no_findings_text(board, quiet) != "no findings: every host answers"
    before = {h: w for h in ctl.run_hosts
              if (w := not_answering(board.link(h), None, 103.0, 0.0)) is not None}
    assert before == {} and builtin_findings(board, before) == []
    assert no_findings_text(board, before) == \
        "no findings yet: waiting for an answer from titan"
    board.host_polled("titan", ctl.tasks["titan"], 107.0)
    assert no_findings_text(board, {}) == "no findings: every host answers"


def test_log_view_filters_one_task_or_all_with_prefixes() -> None:
    buf = LogBuffer()
    buf.add([("worker:0", "step 1"), ("worker:10", "step 2 OOM"), ("ps:0", "listening")])
    assert buf.render(LogView("worker:10")) == ["step 2 OOM"]
    assert buf.render(LogView(None, "oom")) == ["worker:10 │ step 2 OOM"]
    assert buf.render(LogView(None, "worker:0")) == ["worker:0  │ step 1"]
    assert len(buf.render(LogView())) == 3


def test_merge_findings_keeps_the_apps_own_only_when_they_say_something_new() -> None:
    own = [AppFinding("error", "old-box unreachable", "old-box"),
           AppFinding("warning", "worker:2 exited 1", "titan", task="worker:2"),
           AppFinding("warning", "worker:9 exited 2", "titan", task="worker:9")]
    merged = merge_findings(lab_findings(), own)
    assert [f.text for f in merged[3:]] == ["worker:9 exited 2"]
