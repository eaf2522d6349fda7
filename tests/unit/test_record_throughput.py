"""One speed reader (remote/agent/speed.py) for the run recorder, the dashboard and `status`.

`SPEED_LINES` (tests/support/speed_lines.py) holds every throughput form the README lists as
real trainers print them; tests/app/test_app_model.py and tests/cli/test_cli_status_speed.py read
the same table through the dashboard's model and `tfctl status`.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.speed_lines import SPEED_LINES
from tfctl.remote.agent.record import ThroughputTail
from tfctl.remote.agent.speed import SpeedReader


@pytest.mark.parametrize(("line", "patterns", "value"), SPEED_LINES)
def test_the_recorder_reads_every_form(line: str, patterns: tuple[str, ...],
                                       value: tuple[float, str] | None, tmp_path: Path) -> None:
    found = ThroughputTail(str(tmp_path), [], list(patterns), 0.0).value(line)
    assert found == (pytest.approx(value[0]), value[1]) if value else found is None
    assert found == SpeedReader(patterns).value(line)


def test_lines_are_read_once_and_whole(tmp_path: Path) -> None:
    log = tmp_path / "worker-0.log"
    log.write_text("step 1 steps_per_sec=3\nstep 2 steps_per_sec=4")  # the 2nd line unfinished
    tail = ThroughputTail(str(tmp_path), ["worker:0"], [r"steps_per_sec=(\d+)"], 0.0)
    tail.tick()
    with log.open("a") as out:
        out.write("\n")
    tail.tick()
    tail.tick()
    rows = [line.split(",")[1:] for line in (tmp_path / "throughput.csv").read_text().split()]
    assert rows == [["worker:0", "3", "steps/s"], ["worker:0", "4", "steps/s"]]
