"""A real TensorFlow job lives through a 60 s cut of a host that holds a parameter server.

The bundled trainer (examples/train.py), classic flags style, on h1 and h2: ps:0 and worker:0
(the chief in practice) on h1, ps:1 and worker:1 on h2. Once it trains, h2 is cut off from h1
for 60 s (every packet from h1 dropped at h2: TensorFlow's connections both ways stall, as
they would behind a rebooting switch) while the client still reaches both hosts. h2's watcher
hears nothing from worker 0's port: silence, not a refusal, so it keeps ps:1 and worker:1
running (taking the silence for the chief's end would stop them, and the job would lose a
parameter server); `status` during the cut names h2 and the silence. After the heal
TensorFlow's own connections carry on and the job finishes, every task with it, exit 0.

Kept small: a tiny MLP, two hosts, few steps. The training stalls during the cut (every step
needs ps:1), so the steps only have to outlast the moment the cut begins. Still ~4 minutes (the
cut, and TensorFlow's ~80 s to reconnect after it), so it is marked slow and run by hand
(`pytest -m slow tests/testbed/test_tf_partition.py`); the suite proves the same watcher rule with
a light job in tests/testbed/test_silence.py.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.support.testbed.testbed import Testbed
from tests.support.testbedtools import (
    examples_job_dir,
    run_id_from,
    status_json,
    task_pid,
    tfctl,
    wait_until,
)

pytestmark = [pytest.mark.testbed, pytest.mark.tf, pytest.mark.slow]

CUT_S = 60.0
STEPS = 600  # seconds of training on the lab's CPUs: it must outlast the moment of the cut
JOB = {"script": "train.py", "style": "flags",
       "args": [f"--steps={STEPS}", "--log_every=25", f"--checkpoint_every={STEPS}"]}


def test_a_60_s_cut_of_a_ps_host_and_the_job_finishes_exit_0(
        isolated_testbed: Testbed, tmp_path: Path) -> None:
    testbed = isolated_testbed
    inv = testbed.write_inventory(examples_job_dir(tmp_path) / "cluster.yaml", JOB,
                              hosts=["h1", "h2"])
    try:
        up = tfctl(inv, "up", timeout=300)
        assert up.returncode == 0, up.stdout + up.stderr
        run_id = run_id_from(up.stdout)
        log = testbed.host("h1").workdir / ".tfctl" / "runs" / run_id / "worker-0.log"
        wait_until("worker:0 training", lambda: log.exists() and "steps_per_sec=" in
               log.read_text(), 180)
        on_h2 = {t: task_pid(run_id, t) for t in ("ps:1", "worker:1")}
        testbed.cut_from("h2", ["h1"])
        cut_at = time.monotonic()
        assert "RESULT" not in log.read_text(), "the job ended before the cut"
        assert all(on_h2.values()), on_h2

        # During the cut: h2 named, with the task it cannot reach and since when.
        st = wait_until("h2's silence in status",
                        lambda: (s := status_json(inv, 3))["silences"] and s, 30)
        assert [(s["host"], s["task"]) for s in st["silences"]] == [("h2", "worker:0")]
        time.sleep(max(0.0, cut_at + 40 - time.monotonic()))  # past the 20 s of a refusal
        table = tfctl(inv, "--connect-timeout", "3", "status", timeout=60)
        print(f"\n$ tfctl status   # {time.monotonic() - cut_at:.0f} s into the cut\n"
              + table.stdout + table.stderr)
        assert "h2 cannot reach worker:0 on h1" in table.stdout, table.stdout
        st = status_json(inv, 3)
        assert {t["name"]: t["state"] for t in st["tasks"]} == {
            "ps:0": "running", "ps:1": "running", "worker:0": "running",
            "worker:1": "running"}, st["tasks"]
        assert st["silences"][0]["silent_s"] >= 35
        time.sleep(max(0.0, cut_at + CUT_S - time.monotonic()))
        testbed.heal("h2")
        healed_at = time.monotonic()
        assert {t: task_pid(run_id, t) for t in on_h2} == on_h2  # never stopped
        before = log.read_text().count("steps_per_sec=")
        wait_until("worker:0 training again",
                   lambda: log.read_text().count("steps_per_sec=") > before, 240)
        print(f"\nworker:0 trains again {time.monotonic() - healed_at:.0f} s after the heal")

        wait = tfctl(inv, "wait", "--timeout", "300", timeout=330)
        logs = tfctl(inv, "logs", "-n", "15").stdout
        print(f"$ tfctl wait   # {time.monotonic() - healed_at:.0f} s after the heal\n"
              + wait.stdout + wait.stderr)
        assert wait.returncode == 0, wait.stdout + wait.stderr + logs
        st = status_json(inv, 3)
        states = {t["name"]: (t["state"], t["exit_code"]) for t in st["tasks"]}
        assert states == {"worker:0": ("exited", 0), "worker:1": ("exited", 0),
                          "ps:0": ("stopped", None), "ps:1": ("stopped", None)}, states
        assert st["exit_code"] == 0 and st["job_ended"] and st["silences"] == []
        assert "worker:0 | RESULT" in tfctl(inv, "logs", "-n", "400").stdout
    finally:
        testbed.heal("h2")
        tfctl(inv, "down", "--grace", "1")
