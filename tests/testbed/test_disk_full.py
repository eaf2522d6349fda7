"""A host's disk that fills up under a run, and task logs that would fill one, on the lab.

h2's run folders are put on a small tmpfs, mounted in the mount namespace its sshd serves every
session from (`ip netns exec` gives it one; root, the isolated lab) and read from here through
`/proc/<sshd pid>/root`: filled up while a light job trains, `status` says the records stopped
there, disk full, while every task keeps running and stepping; with room again the records
resume (a `records` event) and the log says how much output was lost. A chatty task's log is
rotated at the job's `log_max_mb`, the newest lines kept. `check` warns below
`job.disk_floor_mb`.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.procs import alive
from tests.support.testbed.reboot import _in_sshd_mounts
from tests.support.testbedtools import job_dir, tfctl, wait_until

pytestmark = pytest.mark.testbed


@pytest.fixture
def small_runs(testbed: Any) -> Iterator[Path]:  # type: ignore[no-untyped-def]
    """h2's `.tfctl/runs` on a 16 MiB tmpfs for this test, as h2's sessions see it."""
    if not testbed.isolated:
        pytest.skip("needs the isolated (root, ip netns) lab")
    runs = testbed.host("h2").workdir / ".tfctl" / "runs"
    runs.mkdir(parents=True, exist_ok=True)
    _in_sshd_mounts(testbed, "h2", "mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(runs))
    try:
        yield Path(f"/proc/{testbed.sshd_pid('h2')}/root{runs}")
    finally:
        _in_sshd_mounts(testbed, "h2", "umount", "-l", str(runs))


def fill(folder: Path) -> Path:
    filler = folder / "filler"
    with open(filler, "wb", buffering=0) as f:
        try:
            while True:
                f.write(b"\0" * 65536)
        except OSError:
            pass
    return filler


def steps(log: Path) -> int:
    lines = [x for x in log.read_text(errors="replace").splitlines() if x.startswith("step ")]
    return int(lines[-1].split()[1]) if lines else 0


def status(inv: Path) -> tuple[str, dict[str, Any]]:
    text = tfctl(inv, "status")
    data = tfctl(inv, "status", "--json")
    assert text.returncode == 0 and data.returncode == 0, text.stderr + data.stderr
    return text.stdout, json.loads(data.stdout)


def test_a_full_disk_stops_the_records_not_the_training(  # type: ignore[no-untyped-def]
        testbed, small_runs: Path, tmp_path: Path, down_after: list[Path]) -> None:
    inv = testbed.write_inventory(job_dir(tmp_path) / "cluster.yaml", {
        "script": "job.py", "style": "tf_config", "args": ["--steps=100000", "--step_s=0.05"]})
    down_after.append(inv)
    up = tfctl(inv, "up")
    assert up.returncode == 0, up.stdout + up.stderr
    [run_dir] = [p for p in small_runs.iterdir() if p.is_dir()]
    log = run_dir / "worker-1.log"
    wait_until("steps in worker:1's log", lambda: steps(log) > 5, 30)
    filler = fill(small_runs)

    said = wait_until("records stopped in status",
                      lambda: (s := status(inv)) and "records stopped on h2" in s[0] and s, 30)
    text, data = said
    line = next(x for x in text.splitlines() if x.startswith("records stopped on h2"))
    assert "disk full" in line and "its tasks keep running" in line, text
    assert data["records_stopped"]["h2"]["why"] == "disk full"
    assert set(data["records_stopped"]) == {"h2"}
    pid = next(t["pid"] for t in data["tasks"] if t["name"] == "worker:1")
    time.sleep(3)  # training on without room for its output
    _, later = status(inv)
    states = {t["name"]: t["state"] for t in later["tasks"]}
    assert set(states.values()) == {"running"}, states
    assert next(t["pid"] for t in later["tasks"] if t["name"] == "worker:1") == pid
    before = steps(log)

    filler.unlink()  # room again: the records resume, the log says what it lost
    wait_until("records resumed", lambda: "records stopped" not in status(inv)[0], 30)
    wait_until("worker:1 stepping on in its log", lambda: steps(log) > before + 20, 30)
    text = log.read_text()
    assert "bytes of output lost: no room on the disk" in text
    events = [json.loads(x) for x in (run_dir / "events.jsonl").read_text().splitlines()]
    gap = [e for e in events if e["event"] == "records"]
    assert len(gap) == 1 and gap[0]["why"] == "disk full"
    assert gap[0]["resumed_at"] > gap[0]["stopped_at"]


def test_a_chatty_task_s_log_is_rotated_at_its_cap(  # type: ignore[no-untyped-def]
        testbed, tmp_path: Path, down_after: list[Path]) -> None:
    inv = testbed.write_inventory(job_dir(tmp_path) / "cluster.yaml", {
        "script": "job.py", "style": "tf_config", "log_max_mb": 0.25,
        "args": ["--forever", "--log-lines=30000"]}, hosts=["h1"])
    down_after.append(inv)
    up = tfctl(inv, "up")
    assert up.returncode == 0, up.stdout + up.stderr
    run_dir = next(p for p in (testbed.host("h1").workdir / ".tfctl" / "runs").iterdir()
                   if p.name in up.stdout + up.stderr)
    log, older = run_dir / "worker-0.log", run_dir / "worker-0.log.1"
    wait_until("the last line", lambda: "line 0030000" in log.read_text(errors="replace"), 30)
    cap = 256 << 10
    assert log.stat().st_size <= cap and older.stat().st_size <= cap
    assert "line 0000001" not in older.read_text() + log.read_text()  # the oldest dropped
    _, data = status(inv)
    assert {t["name"]: t["state"] for t in data["tasks"]}["worker:0"] == "running"
    logs = tfctl(inv, "logs", "worker:0", "-n", "1")
    assert "line 0030000" in logs.stdout, logs.stdout + logs.stderr


def test_check_warns_below_the_disk_floor(testbed, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    inv = testbed.write_inventory(job_dir(tmp_path) / "cluster.yaml", {
        "script": "job.py", "style": "tf_config", "disk_floor_mb": 10 ** 9}, hosts=["h1"])
    check = tfctl(inv, "check")
    out = check.stdout + check.stderr
    assert "free in the workdir's filesystem, below job.disk_floor_mb (1000000000 MB)" in out


def test_the_job_ends_on_a_full_host_and_is_recorded_once_there_is_room(  # type: ignore[no-untyped-def]
        testbed, small_runs: Path, tmp_path: Path, down_after: list[Path]) -> None:
    """The job's end while h2's disk is full: h2's watcher stops its parameter server all the
    same; its end and the task's exit are recorded once there is room."""
    inv = testbed.write_inventory(job_dir(tmp_path) / "cluster.yaml", {
        "script": "job.py", "style": "tf_config", "args": ["--steps=80", "--step_s=0.1"]})
    down_after.append(inv)
    # h2 takes h1's worker for ended once its port has been closed 3 s (20 s by default).
    up = tfctl(inv, "up", env={"TFCTL_CLOSED_FOR_GOOD_S": "3"})
    assert up.returncode == 0, up.stdout + up.stderr
    [run_dir] = [p for p in small_runs.iterdir() if p.is_dir()]
    _, data = status(inv)
    ps1 = next(t["pid"] for t in data["tasks"] if t["name"] == "ps:1")
    filler = fill(small_runs)
    try:
        wait_until("h2's ps:1 stopped at the job's end", lambda: not alive(ps1), 90)
    except AssertionError as exc:
        files = {p.name: p.stat().st_size for p in run_dir.iterdir()}
        raise AssertionError(f"{exc}; on h2: {files}\n{(run_dir / 'keeper.log').read_text()}"
                             ) from None
    assert not (run_dir / "finished.json").exists()  # no room for it yet
    filler.unlink()
    wait_until("h2's end recorded", lambda: (run_dir / "finished.json").exists(), 30)
    assert json.loads((run_dir / "finished.json").read_text())["status"]["state"] == "finished"
    wait_until("ps:1's exit recorded", lambda: (run_dir / "ps-1.exit.json").exists(), 30)
    _, data = status(inv)
    assert {t["name"]: t["state"] for t in data["tasks"]}["ps:1"] == "stopped"
