"""A host's link cut mid-run, seen in `tfctl ui` in a real terminal (tmux), and healed.

What the dashboard must say while h2 is cut off (what is known, and how old it is):
"unreachable since T (no answer for N s)" on h2's line, never an error quoting a command line;
h2's task not "running" but "unknown", its last line marked "[stale since T]"; h2's GPU "stale
since T", never "foreign" (the GPU's process is our worker, whose host could just not be
asked). After `testbed.heal` everything reads normal again with no key pressed.

The GPUs are the test-only nvidia-smi stand-in's (tests/support/fakes), set up by the
`gpu_testbed` fixture (tests/support/testbed/fixtures.py); `tfctl status` during the cut is
checked at the end.
"""

from __future__ import annotations

import json
import shutil
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.support.testbed.testbed import Testbed
from tests.support.testbedtools import FOREVER, job_dir, run_id_from, tfctl
from tests.support.tmuxpane import Pane

pytestmark = [pytest.mark.testbed,
              pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux")]


QUIET_S = 15.0
"""How long after the cut the dashboard must keep saying the same: three of the telemetry's
retries of an unreachable host (remote/gpus/telemetry.py unreachable_retry_s, 5 s) and many of
the GPU owner refreshes (one with each findings round, every second with --task-refresh 1)."""


def lines_with(screen: str, *words: str) -> list[str]:
    return [ln for ln in screen.splitlines() if all(w in ln for w in words)]


def task_line(screen: str, task: str) -> str:
    """The tasks table's row of `task` (its name then its host in the next column)."""
    found = [ln for ln in screen.splitlines() if f"{task} " in ln and (" h1 " in ln
                                                                      or " h2 " in ln)]
    return found[0] if found else ""


def host_line(screen: str, host: str, address: str) -> str:
    found = lines_with(screen, f"{host}  {address}")
    return found[0] if found else ""


def gpu_owner_lines(screen: str) -> list[str]:
    """The Hosts panel's GPU rows (the stand-in's cards are GTX 1080 Ti)."""
    return lines_with(screen, "1080 Ti")


def false_alarm(screen: str) -> str | None:
    if "foreign" in screen:
        return "a GPU of the cut host was called foreign"
    if "error since" in screen or "-S -c BOOT" in screen:
        return "the cut host was shown as an error quoting a command line"
    return None


def test_cut_host_reads_unreachable_stale_not_foreign_then_heals(
        gpu_testbed: Testbed, tmp_path: Path) -> None:
    if not gpu_testbed.isolated:
        pytest.skip("needs the network-namespace lab (root and `ip netns`)")
    inv = gpu_testbed.write_inventory(job_dir(tmp_path) / "cluster.yaml", FOREVER,
                                      hosts=["h1", "h2"], gpus={"h1": [0], "h2": [0]},
                                      ps={"h1": 1, "h2": 0})
    h2 = gpu_testbed.address("h2")
    pane: Pane | None = None
    try:
        up = tfctl(inv, "up")
        assert up.returncode == 0, up.stdout + up.stderr
        run_id_from(up.stdout)
        pane = Pane(f"{sys.executable} -m tfctl.tui -i {inv} --connect-timeout 2 ui "
                    f"--task-refresh 1")

        def normal(screen: str) -> bool:
            return ("running" in task_line(screen, "worker:1")
                    and "ok" in host_line(screen, "h2", h2)
                    and any("worker:1" in ln for ln in gpu_owner_lines(screen)))

        pane.wait("the run shown, worker:1 on h2's GPU", normal, timeout_s=90)

        gpu_testbed.cut("h2")
        cut_at = time.monotonic()

        def cut_shown(screen: str) -> bool:
            line = host_line(screen, "h2", h2)
            task = task_line(screen, "worker:1")
            # The task's last line reads "[stale since T] …", cut to the column's width here.
            return ("unreachable since" in line and "no answer for" in line
                    and "running" not in task and "unknown" in task and "[stale" in task
                    and any("stale since" in ln for ln in gpu_owner_lines(screen)))

        screen = pane.wait("h2 unreachable, its task and GPU stale", cut_shown, timeout_s=60,
                           never=false_alarm)
        assert "running" in task_line(screen, "worker:0")  # h1 goes on
        # And it stays so for QUIET_S (the owner refresh and the telemetry retry keep failing
        # meanwhile), while the command line is asked the same, in processes of its own.
        with ThreadPoolExecutor(4) as pool:
            asked = {args: pool.submit(tfctl, inv, "--connect-timeout", "2", *args, timeout=60)
                     for args in (("status",), ("status", "--json"), ("gpus", "--json"),
                                  ("gpus",))}
            pane.wait("a quiet while", lambda s: time.monotonic() - cut_at > QUIET_S
                      and all(f.done() for f in asked.values()), timeout_s=60,
                      never=lambda s: false_alarm(s) or (None if cut_shown(s)
                                                         else "the cut host's state flickered"))
        status = asked["status",].result()
        assert status.returncode == 0, status.stderr
        assert "unreachable since" in status.stdout and "no answer for" in status.stdout
        as_json = json.loads(asked["status", "--json"].result().stdout)
        h2_state = as_json["hosts"]["h2"]
        assert h2_state["reachable"] is False and h2_state["unreachable_since"]
        assert as_json["hosts"]["h1"]["reachable"] is True
        rows = json.loads(asked["gpus", "--json"].result().stdout)
        assert {r["host"]: r["reachable"] for r in rows} == {"h1": True, "h2": False}, rows
        assert all(r["unreachable_since"] for r in rows if r["host"] == "h2")
        assert "unreachable since" in asked["gpus",].result().stdout

        gpu_testbed.heal("h2")
        pane.wait("h2 normal again after the heal", lambda s: normal(s) and "unreachable"
                  not in s and "stale" not in s, timeout_s=90, never=false_alarm)
    finally:
        if pane is not None:
            pane.close()
        gpu_testbed.heal("h2")
        tfctl(inv, "down", "--grace", "1")
