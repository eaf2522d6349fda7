"""One speed reader (remote/agent/speed.py) for the run recorder, the dashboard and `status`.

`SPEED_LINES` holds every throughput form the README lists (the bundled trainer's
`steps_per_sec=`, TF1's `global_step/sec`, `examples/sec`, Keras' `ms/step`) as real trainers
print them; tests/app/test_app_model.py and tests/cli/test_cli_status_speed.py read the same table
through the dashboard's model and `tfctl status`.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tfctl.remote.agent.record import ThroughputTail
from tfctl.remote.agent.speed import SpeedReader

# (log line, the job's `throughput:` regexes, (speed, unit) or None)
SPEED_LINES: list[tuple[str, tuple[str, ...], tuple[float, str] | None]] = [
    ("step 20 loss=0.3 accuracy=0.9 steps_per_sec=41.2", (), (41.2, "steps/s")),
    ("steps_per_second: 7", (), (7.0, "steps/s")),
    ("INFO:tensorflow:global_step/sec: 149.1", (), (149.1, "steps/s")),
    ("I1125 10:00:01.5 140 basic_session_run_hooks.py:702] global_step/sec: 149.1", (),
     (149.1, "steps/s")),
    ("global_step/sec 149.1", (), (149.1, "steps/s")),
    ("step 1180, loss = 0.42 (2580.3 examples/sec; 0.050 sec/batch)", (), (20.0, "steps/s")),
    ("step 1180, loss = 0.42 (2580.3 examples/sec)", (), (2580.3, "examples/s")),
    ("100/100 [==============================] - 2s 20ms/step - loss: 0.1", (), (50.0, "steps/s")),
    ("100/100 ━━━━━━━━━━━━━━━━━━━━ 1s 5ms/step - accuracy: 0.9 - loss: 0.3", (),
     (200.0, "steps/s")),
    ("938/938 - 1s - 500us/step - loss: 0.2", (), (2000.0, "steps/s")),
    ("10/10 - 4s - 2s/step - loss: 0.2", (), (0.5, "steps/s")),
    ("  1/100 [..] - ETA: 9s 90ms/step\r 50/100 [==>..] - ETA: 1s 25ms/step", (),
     (40.0, "steps/s")),
    ("epoch 1: 12.5 steps/s", (), (12.5, "steps/s")),
    ("it 300 rate=7.5it/s", (r"rate=([0-9.]+)it/s",), (7.5, "steps/s")),
    ("batch 9 throughput 812.0 images", (r"throughput ([0-9.]+) images",), (812.0, "steps/s")),
    ("images 812.0 examples", (r"([0-9.]+) examples",), (812.0, "examples/s")),
    ("step 9 took 125ms/step", (r"took ([0-9.]+)ms/step",), (8.0, "steps/s")),
    ("step 20 steps_per_sec=41.2", (r"rate=([0-9.]+)it/s",), None),  # the job's regexes only
    ("loading data", (), None),
    ("0.000 sec/batch", (), None),
    ("loss = 0.42", (), None),
]


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
