"""A host that cannot reach the chief keeps its tasks, and says so: on the lab, no TensorFlow.

h2 is cut off from h1 (where worker 0, the flags style's chief, runs) while the client still
reaches both: h2's watcher hears nothing from worker 0's port (silence, not a refusal), keeps
its ps and worker running past the grace a refused port is given (3 s here, 20 s by default),
and `status` (table and --json), `gpus` (table and --json) and the dashboard (in tmux) name h2,
the task it cannot reach and since when. After the heal the silence is gone and the tasks are
the same processes. (A real TensorFlow job through a 60 s cut:
tests/testbed/test_tf_partition.py; a silence past the job's window: tests/testbed/test_job_end.py.)
"""

from __future__ import annotations

import json
import shutil
import sys
import time
from pathlib import Path

import pytest

from tests.support.testbed.testbed import Testbed
from tests.support.testbedtools import (
    FOREVER_FLAGS,
    job_dir,
    run_id_from,
    status_json,
    task_pid,
    tfctl,
    wait_until,
)
from tests.support.tmuxpane import Pane

pytestmark = pytest.mark.testbed

REFUSED_PORT_GRACE_S = 3.0
PAST_THE_GRACE_S = REFUSED_PORT_GRACE_S + 8
"""How long into the cut the tasks must still run: the grace, a few of the watcher's 1 s probe
rounds (each waits up to 1 s for an answer), and the time a stop would take."""
UP_ENV = {"TFCTL_CLOSED_FOR_GOOD_S": str(REFUSED_PORT_GRACE_S)}
"""`up`'s environment: a refused port is taken for the task's end after REFUSED_PORT_GRACE_S
(20 s by default, remote/runs/endrule.py), so the tests wait past it sooner."""


def test_a_host_cut_off_from_the_chief_keeps_its_tasks_and_says_so(
        isolated_testbed: Testbed, tmp_path: Path) -> None:
    testbed = isolated_testbed
    inv = testbed.write_inventory(job_dir(tmp_path) / "cluster.yaml", FOREVER_FLAGS,
                                  hosts=["h1", "h2"])
    pane: Pane | None = None
    try:
        up = tfctl(inv, "up", env=UP_ENV)
        assert up.returncode == 0, up.stdout + up.stderr
        run_id = run_id_from(up.stdout)
        on_h2 = {t: task_pid(run_id, t) for t in ("ps:1", "worker:1")}
        assert all(on_h2.values()), on_h2
        if shutil.which("tmux") is not None:  # the dashboard, in a real terminal
            pane = Pane(f"{sys.executable} -m tfctl.tui -i {inv} --connect-timeout 2 ui "
                        f"--task-refresh 1")
            pane.wait("the run shown", lambda screen: "worker:1" in screen, timeout_s=90)
        testbed.cut_from("h2", ["h1"])
        cut_at = time.time()

        st = wait_until("h2's silence in status --json",
                    lambda: (s := status_json(inv, 3))["silences"] and s, 30)
        (silence,) = st["silences"]
        assert (silence["host"], silence["task"], silence["task_host"], silence["address"]) == (
            "h2", "worker:0", "h1", testbed.address("h1"))
        assert silence["why"] == "timed out" and silence["window_s"] == 600.0
        assert st["hosts"]["h2"]["reachable"] is True  # the client still reaches h2
        assert {t["name"]: t["state"] for t in st["tasks"]} == {
            "ps:0": "running", "ps:1": "running", "worker:0": "running", "worker:1": "running"}

        table = tfctl(inv, "--connect-timeout", "3", "status", timeout=60)
        assert f"h2 cannot reach worker:0 on h1 ({testbed.address('h1')}:" in table.stdout, \
            table.stdout
        assert "(silent for" in table.stdout and "its tasks keep running until" in table.stdout
        print(table.stdout)  # shown by `pytest -s`: what a user sees during the cut
        gpus = tfctl(inv, "--connect-timeout", "3", "gpus", timeout=60)
        assert "h2 cannot reach worker:0 on h1" in gpus.stdout, gpus.stdout + gpus.stderr
        rows = json.loads(tfctl(inv, "--connect-timeout", "3", "gpus", "--json",
                                timeout=60).stdout)
        assert {r["host"]: [s["task"] for s in r["silences"]] for r in rows} == {
            "h1": [], "h2": ["worker:0"]}

        if pane is not None:
            screen = pane.wait("h2's silence among the dashboard's findings",
                               lambda screen: "h2 cannot reach worker:0 on h1" in screen, 60)
            print(screen)

        # Past the grace a refused port gets, h2's tasks still run: silence is not an end.
        time.sleep(max(0.0, cut_at + PAST_THE_GRACE_S - time.time()))
        st = status_json(inv, 3)
        assert [s["host"] for s in st["silences"]] == ["h2"]
        assert {t["name"]: t["state"] for t in st["tasks"] if t["name"] in on_h2} == {
            "ps:1": "running", "worker:1": "running"}
        assert st["job_ended"] is False

        testbed.heal("h2")
        wait_until("the silence gone after the heal",
                   lambda: not status_json(inv, 3)["silences"], 30)
        if pane is not None:
            pane.wait("the finding gone after the heal",
                      lambda screen: "cannot reach" not in screen, 60)
        assert {t: task_pid(run_id, t) for t in on_h2} == on_h2  # the same processes
        events = testbed.host("h2").workdir / ".tfctl" / "runs" / run_id / "events.jsonl"
        kinds = [json.loads(line)["event"] for line in events.read_text().splitlines()]
        assert "silence" in kinds and "heard" in kinds
    finally:
        if pane is not None:
            pane.close()
        testbed.heal("h2")
        tfctl(inv, "down", "--grace", "1")


def test_a_whole_host_cut_past_the_grace_keeps_its_tasks(
    isolated_testbed: Testbed, tmp_path: Path
) -> None:
    """The link of h2 down (a cable moved): nobody reaches h2, h2 reaches nobody. Its watcher
    does not take this for the job's end: its ps and worker outlive the cut."""
    testbed = isolated_testbed
    inv = testbed.write_inventory(job_dir(tmp_path) / "cluster.yaml", FOREVER_FLAGS,
                                  hosts=["h1", "h2"])
    try:
        up = tfctl(inv, "up", env=UP_ENV)
        assert up.returncode == 0, up.stdout + up.stderr
        run_id = run_id_from(up.stdout)
        on_h2 = {t: task_pid(run_id, t) for t in ("ps:1", "worker:1")}
        testbed.cut("h2")
        cut_at = time.time()
        table = tfctl(inv, "--connect-timeout", "2", "status", timeout=60)
        assert "h2 unreachable since" in table.stdout, table.stdout + table.stderr
        time.sleep(max(0.0, cut_at + PAST_THE_GRACE_S - time.time()))
        testbed.heal("h2")
        st = wait_until("h2 answering",
                        lambda: (s := status_json(inv, 3))["hosts"]["h2"]["reachable"] and s, 60)
        assert {t["name"]: t["state"] for t in st["tasks"]} == {
            "ps:0": "running", "ps:1": "running", "worker:0": "running", "worker:1": "running"}
        assert {t: task_pid(run_id, t) for t in on_h2} == on_h2  # the same processes
        wait_until("h2's silence gone after the heal",
                   lambda: not status_json(inv, 3)["silences"], 30)
        assert not (testbed.host("h2").workdir / ".tfctl" / "runs" / run_id / "finished.json"
                    ).exists()
    finally:
        testbed.heal("h2")
        tfctl(inv, "down", "--grace", "1")
