"""`tfctl usage` on the testbed: a one-off run's exact GPU-seconds and idle share, counted by its
watcher on the host, and another user's process counted by the `tfctl lab` samplers of two
users, each minute once; `lab` says each user's share of the week beside their GPUs.

The GPUs are the test-only nvidia-smi stand-in's (tests/support/fakes): a process uses the GPUs
its CUDA_VISIBLE_DEVICES names and shows the utilization its TFCTL_TEST_GPU_UTIL declares.
"""

from __future__ import annotations

import json
import shlex
import time
from pathlib import Path
from typing import Any

import pytest

from tests.support.testbed.testbed import Testbed
from tests.support.testbed.users import ALICE, BOB, CAROL, can_add_users
from tests.support.testbedtools import (
    FOREVER,
    job_dir,
    processes_of_run,
    tfctl,
    user_inventory,
    wait_until,
)

SCRIPT = ("import os, sys, time\n"
          "if 'TFCTL_TEST_GPU_UTIL' not in os.environ:  # the stand-in reads it from /proc\n"
          "    os.execve(sys.executable, [sys.executable, *sys.argv],\n"
          "              {**os.environ, 'TFCTL_TEST_GPU_UTIL': '2'})\n"
          "time.sleep(float(sys.argv[1]))\n")
"""The run's command, given SECONDS: holds its GPUs that long, declaring 2 % utilization (idle)."""
HOLD_S = 15


def _json(done: Any) -> dict[str, Any]:
    assert done.returncode == 0, done.stdout + done.stderr
    return dict(json.loads(done.stdout))


def _watcher_gone(run_dir: Path) -> bool:
    """The run's watcher on the host has ended (it writes the ledger's last count on its way
    out)."""
    try:
        pid = json.loads((run_dir / "keeper.pid.json").read_text())["pid"]
        return "zombie" in Path(f"/proc/{pid}/status").read_text(errors="replace")
    except (OSError, ValueError, KeyError):
        return True


def test_a_runs_gpu_seconds_and_idle_share_are_counted_exactly(
        gpu_testbed: Testbed, tmp_path: Path) -> None:
    inv = gpu_testbed.write_inventory(job_dir(tmp_path) / "cluster.yaml", FOREVER, hosts=["h1"],
                                      gpus={"h1": [0, 1]}, ps={"h1": 0})
    (inv.parent / "hold.py").write_text(SCRIPT)
    # the run's process declares 2 % utilization: both its GPUs are held idle (under 5 %)
    said = _json(tfctl(inv, "run", "--gpus", "2", "--json", "--", "python", "hold.py",
                       str(HOLD_S)))
    run_id = said["run_id"]
    waited = tfctl(inv, "wait", "--run", run_id, "--timeout", "120")
    assert waited.returncode == 0, waited.stdout + waited.stderr
    run_dir = gpu_testbed.host("h1").workdir / ".tfctl" / "runs" / run_id
    wait_until("the run's watcher wrote its last count and left", lambda: (
        run_dir / "finished.json").exists() and not processes_of_run(run_id)
        and _watcher_gone(run_dir), 60)
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    start = min(e["t"] for e in events if e.get("task") == "worker:0" and e["event"] == "start")
    end = max(e["t"] for e in events if e.get("task") == "worker:0"
              and e["event"] in ("exit", "stopped"))
    held_for = end - start
    assert held_for >= HOLD_S

    out = tmp_path / "usage-page"
    used = _json(tfctl(inv, "usage", "--json", "--html", str(out)))
    mine = [r for r in used["rows"] if r["id"] == run_id]
    assert {(r["host"], r["kind"], r["index"]) for r in mine} == {("h1", "run", 0),
                                                                   ("h1", "run", 1)}
    held = sum(r["held_s"] for r in mine)
    assert held == pytest.approx(2 * held_for, rel=0.1), (held, held_for, mine)
    idle = sum(r["idle_s"] for r in mine)
    assert 0.8 * held <= idle <= held, mine  # idle from the stand-in's 2 %, once it sampled
    (user,) = {r["user"] for r in mine}
    group = next(g for g in used["groups"] if g["key"] == user)
    assert group["gpu_seconds"] >= held - 0.1 and group["seconds_by_kind"]["run"] >= held - 0.1
    assert used["unanswered"] == {} and used["hosts"] == ["h1"]
    assert used["idle_below_pct"] == 5.0
    page = (out / "usage.html").read_text()
    assert f'<img alt="user {user}: GPU-hours per day" src="data:image/png;base64,' in page
    assert '<img alt="host h1: GPU-hours per user"' in page
    assert (out / f"user-{user}.png").read_bytes()[:4] == b"\x89PNG"

    table = tfctl(inv, "usage", "--by", "gpu", env={"COLUMNS": "200"})
    assert table.returncode == 0, table.stdout + table.stderr
    assert "h1:0" in table.stdout and "h1:1" in table.stdout
    bad = tfctl(inv, "usage", "--since", "soon")
    assert bad.returncode == 2 and "cannot read the duration 'soon'" in bad.stderr
    assert "Traceback" not in bad.stderr

    both = gpu_testbed.write_inventory(tmp_path / "two.yaml", FOREVER, hosts=["h1", "h3"],
                                       gpus={"h1": [0]}, ps={"h1": 0, "h3": 0})
    gpu_testbed.stop_sshd("h3")  # a host that cannot be reached: named, its hours left out
    try:
        partial = tfctl(both, "--connect-timeout", "2", "usage", "--json", timeout=60)
        assert partial.returncode == 1, partial.stdout + partial.stderr
        found = json.loads(partial.stdout)
        assert found["hosts"] == ["h1"] and list(found["unanswered"]) == ["h3"]
        assert not any(r["host"] == "h3" for r in found["rows"])  # left out, not zero
        assert "h3:" in partial.stderr and "its hours are left out" in partial.stderr
        assert "Traceback" not in partial.stderr
    finally:
        gpu_testbed.start_sshd("h3")


def _as_user(testbed: Testbed, host: str, user: str, command: str) -> str:
    done = testbed.run(host, f"setpriv --reuid={user} --regid={user} --init-groups "
                             f"bash -c {shlex.quote(command)}")
    return str(done.stdout).strip()


@pytest.mark.skipif(not can_add_users(), reason="other Unix users need root")
def test_another_users_process_is_counted_by_the_samplers_each_minute_once(
        shared_testbed: Testbed, tmp_path: Path) -> None:
    testbed = shared_testbed
    first_minute = int(time.time() // 60)
    carol_pid = _as_user(testbed, "h1", CAROL, "CUDA_VISIBLE_DEVICES=1 TFCTL_TEST_GPU_UTIL=0 "
                         "setsid sleep 300 </dev/null >/dev/null 2>&1 & echo $!")
    invs = {u: user_inventory(testbed, testbed.users[u], tmp_path / u, hosts=["h1"],
                              gpus={"h1": [0]}, ps={"h1": 0}) for u in (ALICE, BOB)}
    folder = testbed.claims_dir("h1") / "ledger"
    try:
        for inv in invs.values():  # each user's sampler, sampling every 2 s
            looked = tfctl(inv, "lab", "--json", "--idle-after", "8s")
            assert looked.returncode == 0, looked.stdout + looked.stderr

        def seen_by(user: str) -> bool:
            return any("GPU-" in key and key.endswith(f" {carol_pid}")
                       for path in folder.glob(f"{user}.seen.*.json")
                       for key in json.loads(path.read_text())["procs"])

        wait_until("both users' samplers saw carol's process",
                   lambda: seen_by(ALICE) and seen_by(BOB), 30)
        used = _json(tfctl(invs[BOB], "usage", "--json"))
        last_minute = int(time.time() // 60)
        (row,) = [r for r in used["rows"] if r["id"] == f"pid {carol_pid}"]
        assert (row["user"], row["kind"], row["host"], row["index"]) == (CAROL, "other",
                                                                         "h1", 1)
        # each minute once, though two samplers saw it: at most the minutes the test spans
        assert 60 <= row["held_s"] <= 60 * (last_minute - first_minute + 1), row
        assert row["held_s"] % 60 == 0 and row["idle_s"] == row["held_s"]  # 0 % declared

        lab = _json_list(tfctl(invs[BOB], "lab", "--json", "--idle-after", "8s"))
        held = next(r for r in lab if r["host"] == "h1" and r["gpu"] == 1)
        assert [h["user"] for h in held["holders"]] == [CAROL]
        assert held["week_share"][CAROL] > 0
        table = tfctl(invs[BOB], "lab", env={"COLUMNS": "220"})
        assert f"{CAROL} (" in table.stdout and "% this week)" in table.stdout, table.stdout
    finally:
        testbed.run("h1", f"kill {carol_pid}", check=False)


def _json_list(done: Any) -> list[dict[str, Any]]:
    assert done.returncode == 0, done.stdout + done.stderr
    return list(json.loads(done.stdout))
