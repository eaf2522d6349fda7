"""Every throughput form the README lists (the bundled trainer's `steps_per_sec=`, TF1's
`global_step/sec`, `examples/sec`, Keras' `ms/step`) as real trainers print them, with the speed
each must read as: one table for the recorder (tests/unit/test_record_throughput.py), the
dashboard's model (tests/app/test_app_model.py) and `tfctl status`
(tests/cli/test_cli_status_speed.py)."""

from __future__ import annotations

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
