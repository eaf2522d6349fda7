"""The dashboard's pure model says what is known of a host, and how old it is.

A host that does not answer reads "unreachable since T (no answer for N s)" (never an error
quoting the command that got no answer); its tasks read "unknown" with their last lines marked
"[stale since T]" and their uptime as it was; its GPUs "stale since T", never "foreign"; and all
of it reads normal again once the host answers. Tables over hand-built facts and fixed clocks
(TZ=UTC), so every word is checked exactly. The same on the lab, in tmux:
tests/testbed/test_ui_cut_heal.py.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.support.fakes.ui_sources import FIXED_WALL_S, GTX970_GPU, FakeController, lab_inventory
from tfctl.remote.errors import HostUnreachable, PythonMissing
from tfctl.remote.gpus.lastseen import HostTelemetry
from tfctl.remote.gpus.nvsmi import GpuProcess
from tfctl.remote.reach import reach_json, unreachable_words
from tfctl.remote.runs.status import TaskStatus
from tfctl.tui.app.model import cells
from tfctl.tui.app.model.board import DOWN, OK, STALE, WARN, Board, HostLink
from tfctl.tui.app.model.hostlines import build_host_lines, host_state
from tfctl.tui.app.widgets.cluster import gpu_text
from tfctl.tui.app.widgets.header import builtin_findings

W = FIXED_WALL_S  # 09:42:10 UTC
M = 5000.0  # the monotonic clock's reading at W


# "unreachable since 09:42:10" is local time: the zone is pinned (tests/conftest.py `utc`).
pytestmark = pytest.mark.usefixtures("utc")


def cut_link(poll_began: float, failed: float, error_type: type[Exception] = HostUnreachable,
             what: str = "no answer within 2 s to agent status") -> HostLink:
    """A link that answered at W - 1, then a poll began at `poll_began` and failed."""
    board = Board(FakeController().plan)
    board.host_polled("gtx970", (), W - 1)
    board.poll_started("gtx970", poll_began)
    board.host_failed("gtx970", what, error_type, failed)
    return board.link("gtx970")


def quiet_telemetry(last_sample: float, failed_at: float,
                    error: str = "h (10.0.0.2:22) unreachable: no answer within 2 s"
                    ) -> HostTelemetry:
    """GPU samples until `last_sample` (monotonic), then a failed reconnect: unreachable."""
    ok = HostTelemetry("gtx970", (GTX970_GPU,), (GpuProcess(GTX970_GPU.uuid, 4321, 3700.0,
                                                            "python3"),),
                       last_sample_at=last_sample)
    return ok.with_error("no output from nvidia-smi for 5 s", None, last_sample) \
        .with_error(error, HostUnreachable, failed_at)


@pytest.mark.parametrize(("since", "now", "words"), [
    (W, W + 35, "unreachable since 09:42:10 (no answer for 35 s)"),
    (W, W, "unreachable since 09:42:10 (no answer for 0 s)"),
    (W + 0.6, W + 3600.4, "unreachable since 09:42:10 (no answer for 3600 s)"),
])
def test_unreachable_words(since: float, now: float, words: str) -> None:
    assert unreachable_words(since, now) == words


def test_reach_json_says_reachable_or_since_when_in_iso_8601() -> None:
    assert reach_json(None, W) == {"reachable": True, "unreachable_since": None,
                                   "no_answer_s": None}
    assert reach_json(W, W + 35, "timed out") == {
        "reachable": False, "unreachable_since": "2026-11-22T09:42:10+00:00", "no_answer_s": 35,
        "why": "timed out"}


HOST_STATES = [
    # (what the task polls say, what the telemetry says, now (wall), expected words, level);
    # built when the test runs (lambdas), so that each case passes or fails on its own.
    pytest.param(lambda: (cut_link(W + 2, W + 4), None), W + 40,
                 "unreachable since 09:42:12 (no answer for 38 s)", DOWN, id="poll-timed-out"),
    pytest.param(lambda: (cut_link(W + 2, W + 4,
                                   what="the connection dropped during agent status"), None),
                 W + 40, "unreachable since 09:42:12 (no answer for 38 s)", DOWN,
                 id="poll-connection-dropped"),
    pytest.param(lambda: (None, quiet_telemetry(M, M + 7)), W + 35,
                 "unreachable since 09:42:10 (no answer for 35 s)", DOWN,
                 id="no-run-telemetry-only"),
    pytest.param(lambda: (cut_link(W + 3, W + 5), quiet_telemetry(M, M + 7)), W + 35,
                 "unreachable since 09:42:10 (no answer for 35 s)", DOWN,
                 id="both-the-earlier-wins"),
    pytest.param(lambda: (HostLink(polled_at_s=W + 20), quiet_telemetry(M, M + 7)), W + 21,
                 "GPU telemetry reconnecting", STALE, id="healed-polls-answer-again"),
]


@pytest.mark.parametrize(("witnesses", "now", "words", "level"), HOST_STATES)
def test_host_state_says_unreachable_since_and_for_how_long(
        witnesses: Callable[[], tuple[HostLink | None, HostTelemetry | None]], now: float,
        words: str, level: str) -> None:
    link, telemetry = witnesses()
    assert host_state(link, telemetry, now, M + (now - W), None) == (words, level)


def test_a_failure_that_is_not_silence_still_says_error() -> None:
    link = cut_link(W + 2, W + 4, error_type=PythonMissing, what="python 'py9' is not runnable")
    assert host_state(link, None, W + 9, M + 9, None) == (
        "error since 09:42:12: python 'py9' is not runnable", WARN)


def _board_with_gtx970(tasks: tuple[TaskStatus, ...], at: float) -> Board:
    ctl = FakeController(unreachable={})
    board = Board(ctl.plan)
    board.set_run(ctl.current())
    board.host_polled("gtx970", tasks, at)
    return board


GTX970_TASKS = (
    TaskStatus("ps:1", "gtx970", "running", pid=4320, uptime_s=100.0, last_line="listening"),
    TaskStatus("worker:4", "gtx970", "running", pid=4321, uptime_s=90.0, mask="0",
               last_line="step 1180, loss = 0.42 (2580.3 examples/sec; 0.054 sec/batch)"),
)


def test_a_cut_hosts_tasks_read_unknown_with_stale_last_lines_then_running_again() -> None:
    board = _board_with_gtx970(GTX970_TASKS, W)
    board.poll_started("gtx970", W + 2)
    board.host_failed("gtx970", "no answer within 2 s to agent status", HostUnreachable, W + 4)
    rows = {r.name: r for r in board.task_rows(W + 40, host="gtx970")}
    worker = rows["worker:4"]
    assert (worker.state, worker.level, worker.rate) == ("unknown", STALE, "–")
    assert worker.last == ("[stale since 09:42:12] step 1180, loss = 0.42 (2580.3 examples/sec; "
                           "0.054 sec/batch)")
    assert worker.up == cells.duration(90.0)  # as it was read, not advancing with the clock
    assert rows["ps:1"].state == "unknown" and rows["ps:1"].last.startswith("[stale since")
    assert board.elapsed_s(W + 40) == 100.0  # nor does the run's age count on them
    assert not board.tasks_known("gtx970")

    board.host_polled("gtx970", GTX970_TASKS, W + 50)  # healed: nobody pressed anything
    worker = {r.name: r for r in board.task_rows(W + 51, host="gtx970")}["worker:4"]
    assert (worker.state, worker.level, worker.rate) == ("running", OK, "18.5")
    assert worker.last.startswith("step 1180") and worker.up == cells.duration(91.0)
    assert board.tasks_known("gtx970")


def test_a_task_never_read_on_a_cut_host_says_since_when() -> None:
    board = _board_with_gtx970((), W)
    board.poll_started("gtx970", W + 2)
    board.host_failed("gtx970", "timed out", HostUnreachable, W + 4)
    row = {r.name: r for r in board.task_rows(W + 9)}["ps:2"]  # old-box: never answered
    assert row.state == "waiting"  # old-box was never polled: nothing is claimed about it
    board.host_failed("old-box", "timed out", HostUnreachable, W + 4)
    row = {r.name: r for r in board.task_rows(W + 9)}["ps:2"]
    assert (row.state, row.last, row.level) == ("unknown", "[unreachable since 09:42:14]", STALE)


def test_a_cut_hosts_gpus_read_stale_since_never_foreign() -> None:
    board = _board_with_gtx970(GTX970_TASKS, W)
    board.poll_started("gtx970", W + 2)
    board.host_failed("gtx970", "no answer within 2 s to agent status", HostUnreachable, W + 4)
    tel = quiet_telemetry(M, M + 7)
    asked: list[tuple[str, str]] = []

    def owner_of(host: str, uuid: str) -> str:  # what a cache that lost the host's pids says
        asked.append((host, uuid))
        return "foreign pid 4321 python3"

    lines = build_host_lines(lab_inventory().hosts, board.links, {"gtx970": tel}, None,
                             owner_of, [], {}, W + 40, M + 40)
    gtx970 = next(h for h in lines if h.name == "gtx970")
    assert gtx970.state == "unreachable since 09:42:10 (no answer for 40 s)"
    (gpu,) = gtx970.gpus
    assert (gpu.owner, gpu.stale, gpu.dim) == ("stale since 09:42:10", True, True)
    assert asked == []  # nobody is asked who holds a GPU of a host that does not answer
    shown = gpu_text(gpu, 80).plain
    assert "stale since 09:42:10" in shown and "foreign" not in shown

    board.host_polled("gtx970", GTX970_TASKS, W + 50)
    healed = HostTelemetry("gtx970", (GTX970_GPU,), tel.processes, last_sample_at=M + 50)
    lines = build_host_lines(lab_inventory().hosts, board.links, {"gtx970": healed}, None,
                             lambda h, u: "worker:4", [], {}, W + 51, M + 51)
    gtx970 = next(h for h in lines if h.name == "gtx970")
    assert (gtx970.state, gtx970.gpus[0].owner, gtx970.gpus[0].stale) == ("ok", "worker:4",
                                                                           False)


def test_the_apps_own_owner_rule_calls_nothing_foreign_while_the_tasks_are_unknown() -> None:
    board = _board_with_gtx970(GTX970_TASKS, W)
    tel = quiet_telemetry(M, M + 7)
    stranger = HostTelemetry("gtx970", (GTX970_GPU,), (GpuProcess(GTX970_GPU.uuid, 999, None,
                                                                   "python3"),))
    assert cells.owner_label(stranger, GTX970_GPU.uuid, board.pid_tasks("gtx970"),
                             known=board.tasks_known("gtx970")) == "foreign pid 999 python3"
    board.host_failed("gtx970", "the connection dropped during agent status", HostUnreachable,
                      W + 4)
    assert cells.owner_label(stranger, GTX970_GPU.uuid, board.pid_tasks("gtx970"),
                             known=board.tasks_known("gtx970")) == "pid 999 python3"
    assert cells.owner_label(tel, GTX970_GPU.uuid, board.pid_tasks("gtx970"),
                             known=board.tasks_known("gtx970")) == "worker:4"


def test_the_apps_own_finding_says_since_when() -> None:
    board = _board_with_gtx970(GTX970_TASKS, W)
    board.poll_started("gtx970", W + 2)
    board.host_failed("gtx970", "no answer within 2 s to agent status", HostUnreachable, W + 4)
    (found,) = builtin_findings(board)
    assert found.text == ("gtx970 unreachable since 09:42:12 (no answer within 2 s to agent "
                          "status): its tasks are unknown and not counted")
