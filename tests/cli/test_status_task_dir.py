"""A task's working directory end to end: the plan's (`Task.cwd`), carried by the run's manifest
to the host's agent, which answers it in the task's record; `tfctl status --json` has it per
task, the status table says it below the table, and the dashboard's task row shows it."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.support.fakes.ui_sources import FakeController
from tfctl.inventory.model import Host
from tfctl.inventory.tasks import Task
from tfctl.remote.connect.local import LocalTransport
from tfctl.remote.connect.session import agentops
from tfctl.remote.runs.status import RunStatus, TaskStatus, task_from_agent
from tfctl.tui.app.model.board import Board
from tfctl.tui.app.widgets.tasks import header_text, row_text
from tfctl.tui.cli.lifecycle import _task_json
from tfctl.tui.cli.output import directories_line, status_table


def _host(tmp_path: Path) -> Host:
    return Host(name="box", address="127.0.0.1", user=None, port=None, identity_file=None,
                known_hosts="/dev/null", jump=None, workdir=str(tmp_path / "work"),
                python=sys.executable, env={}, gpus=(), ps=0, transport="local")


def test_the_hosts_agent_answers_the_plans_directory_in_each_tasks_record(
        tmp_path: Path) -> None:
    t = LocalTransport(_host(tmp_path))
    planned = [Task("worker", i, "box", "127.0.0.1", None, "", {}, cwd, ("true",))
               for i, cwd in enumerate((t.host.workdir, "sub/dir"))]
    manifest = {"inventory": "t", "tasks": [dict(task.to_json(), restart={"policy": "never"})
                                            for task in planned]}
    agentops.up_go(t, t.host.workdir, "r1", manifest=manifest)
    answer = agentops.status(t, t.host.workdir, "r1")
    assert [(r.name, r.cwd) for r in answer.tasks] == [("worker:0", t.host.workdir),
                                                        ("worker:1", "sub/dir")]
    shown = [_task_json(task_from_agent("box", r)) for r in answer.tasks]
    assert [data["cwd"] for data in shown] == [t.host.workdir, "sub/dir"]


def test_status_json_has_each_tasks_directory() -> None:
    task = task_from_agent("h1", {"name": "ps:0", "state": "running", "cwd": "~/w"})
    assert _task_json(task)["cwd"] == "~/w"
    assert _task_json(task_from_agent("h1", {"name": "ps:0"}))["cwd"] is None  # older agent


def test_the_status_table_says_where_the_tasks_run(capsys: pytest.CaptureFixture[str]) -> None:
    same = (TaskStatus("ps:0", "h1", "running", cwd="~/w"),
            TaskStatus("worker:0", "h2", "running", cwd="~/w"))
    status_table(RunStatus("r1", same, {}))
    assert "working directory: ~/w\n" in capsys.readouterr().out
    apart = (*same, TaskStatus("worker:1", "h3", "exited", exit_code=0, cwd="/data/run"))
    assert directories_line(apart) == \
        "working directories: ~/w (ps:0, worker:0); /data/run (worker:1)"
    assert directories_line((TaskStatus("worker:0", "h1", "running"),)) is None


def test_the_dashboards_task_row_shows_the_directory() -> None:
    ctl = FakeController()
    board = Board(ctl.plan)
    board.set_run(ctl.current())
    board.host_polled("titan", [TaskStatus("worker:0", "titan", "running", pid=1001,
                                           uptime_s=5.0, mask="0", cwd="/scratch/alice/run")],
                      1.0)
    rows = {r.name: r for r in board.task_rows(2.0)}
    assert rows["worker:0"].cwd == "/scratch/alice/run"  # the record's
    planned = next(t for t in ctl.plan.tasks if t.name != "worker:0")
    assert rows[planned.name].cwd == planned.cwd  # not read yet: the plan's
    assert "dir" in header_text(120).plain
    assert "…h/alice/run" in row_text(rows["worker:0"], 120).plain  # its end: where it differs
    assert planned.cwd in row_text(rows[planned.name], 120).plain
    narrow = row_text(rows["worker:0"], 100).plain  # the last line keeps its room first
    assert "dir" not in header_text(100).plain and "alice" not in narrow
