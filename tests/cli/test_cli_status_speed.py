"""`tfctl status` states each running task's speed, read from its last lines by the recorder's
own reader (remote/agent/speed.py), over the same table of throughput forms."""

from __future__ import annotations

import pytest

from tests.support.speed_lines import SPEED_LINES
from tfctl.remote.runs.status import RunStatus, TaskStatus
from tfctl.tui.cli.lifecycle import _task_json
from tfctl.tui.cli.output import status_table, task_speed


@pytest.mark.parametrize(("line", "patterns", "value"), SPEED_LINES)
def test_status_reads_the_speed_from_the_newest_line_that_states_one(
        line: str, patterns: tuple[str, ...], value: tuple[float, str] | None) -> None:
    task = TaskStatus("worker:0", "h1", "running", pid=7, last_line="loss = 0.3",
                      last_lines=(line, "loss = 0.3"))
    found = task_speed(task, patterns)
    assert found == (pytest.approx(value[0]), value[1]) if value else found is None
    data = _task_json(task, patterns)
    assert (data["speed_per_s"], data["speed_unit"]) == (found if found else (None, None))


def test_the_status_table_has_the_speed_column(capsys: pytest.CaptureFixture[str]) -> None:
    running = TaskStatus("worker:0", "h1", "running", pid=7, uptime_s=30.0,
                         last_line="loss = 0.3",
                         last_lines=("INFO:tensorflow:global_step/sec: 149.1", "loss = 0.3"))
    ended = TaskStatus("worker:1", "h1", "exited", exit_code=0, last_line="steps_per_sec=9.0",
                       last_lines=("steps_per_sec=9.0",))
    status_table(RunStatus("r1", (running, ended), {}))
    out = capsys.readouterr().out
    assert "steps/s" in out
    row0 = next(ln for ln in out.splitlines() if "worker:0" in ln)
    row1 = next(ln for ln in out.splitlines() if "worker:1" in ln)
    assert "149.1" in row0 and "9.0" not in row1.split("steps_per_sec")[0]  # ended: no speed
