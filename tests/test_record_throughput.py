"""remote/agent/record.ThroughputTail: training speed read from the usual log forms."""

from __future__ import annotations

from pathlib import Path

import pytest

from tfctl.remote.agent.record import ThroughputTail


@pytest.mark.parametrize(("line", "value"), [
    ("step 20 loss=0.3 accuracy=0.9 steps_per_sec=41.2", (41.2, "steps/s")),
    ("INFO:tensorflow:global_step/sec: 12.5", (12.5, "steps/s")),
    ("step 1180, loss = 0.42 (2580.3 examples/sec; 0.050 sec/batch)", (2580.3, "examples/s")),
    ("100/100 [====] - 2s 20ms/step - loss: 0.1", (50.0, "steps/s")),
    ("loading data", None),
])
def test_default_patterns(line: str, value: tuple[float, str] | None, tmp_path: Path) -> None:
    assert ThroughputTail(str(tmp_path), [], [], 0.0).value(line) == value


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
