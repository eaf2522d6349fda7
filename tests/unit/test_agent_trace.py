"""The agent's opt-in trace (remote/agent/trace.py): off unless the workdir holds the trace file,
then one JSON line per event, appended in order, with the host's clock and the agent's pid."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from tfctl.remote.agent.trace import TRACE_NAME, mark, mark_run


def test_off_without_the_file(tmp_path: Path) -> None:
    (tmp_path / ".tfctl").mkdir()
    mark(str(tmp_path), "up_go", run="r1")
    assert not (tmp_path / TRACE_NAME).exists()  # never created: tracing stays off


def test_on_with_the_file_lines_in_order(tmp_path: Path) -> None:
    trace = tmp_path / TRACE_NAME
    trace.parent.mkdir()
    trace.write_text("")
    before = time.time()
    mark(str(tmp_path), "up_go", run="r1")
    run_dir = tmp_path / ".tfctl" / "runs" / "r1"
    mark_run(str(run_dir), "look", settled=2, tasks=3)
    lines = [json.loads(line) for line in trace.read_text().splitlines()]
    assert [line["ev"] for line in lines] == ["up_go", "look"]
    assert lines[0]["run"] == "r1" and lines[1]["settled"] == 2 and lines[1]["tasks"] == 3
    assert all(line["pid"] == os.getpid() for line in lines)
    assert before <= lines[0]["t"] <= lines[1]["t"] <= time.time()
