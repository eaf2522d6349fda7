"""A task's log as its supervisor relays it (remote/agent/tasklog.py, TaskLog): rotated at the job's
`log_max_mb` with the newest output kept, and a full disk costing output, never the task; the
settings and `check`'s free-space floor. On the lab: tests/testbed/test_disk_full.py."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tfctl.inventory.load import parse_inventory
from tfctl.remote.agent.jsonfile import reserve_slot, write_json_when_room
from tfctl.remote.agent.supervisor import OutputPipe, open_pidfd
from tfctl.remote.agent.tasklog import TaskLog
from tfctl.remote.runs.check import judge_room
from tfctl.remote.runs.up.manifest import task_manifest

GOOD = """\
name: lab
hosts:
  - name: h1
job:
  script: train.py
"""


def test_the_log_is_rotated_at_its_cap_and_keeps_the_newest_output(tmp_path: Path) -> None:
    path = tmp_path / "worker-0.log"
    log = TaskLog(str(path), 1000)
    for n in range(100):
        log.write(f"line {n:03d} {'x' * 40}\n".encode())  # 50 bytes each: 5000 in all
    assert path.stat().st_size <= 1000 and (tmp_path / "worker-0.log.1").stat().st_size <= 1000
    assert path.read_text().splitlines()[-1].startswith("line 099")
    assert not list(tmp_path.glob("*.log.2"))  # older output dropped
    kept = (tmp_path / "worker-0.log.1").read_text() + path.read_text()
    assert "line 099" in kept and "line 000" not in kept


def test_a_task_s_output_is_relayed_until_its_last_line(tmp_path: Path) -> None:
    """A task that prints and exits at once: its last lines are in the log when its exit is."""
    path = tmp_path / "chief-0.log"
    log = TaskLog(str(path), 1 << 20)
    pipe = OutputPipe(str(tmp_path / "chief-0.pipe"), fresh=True)
    child = subprocess.Popen([sys.executable, "-c", "import sys\nfor i in range(3000): "
                              "print(i)\nsys.exit('Traceback: the end')"],
                             stdout=pipe.write_fd, stderr=pipe.write_fd, pass_fds=(pipe.read_fd,))
    pidfd = open_pidfd(child.pid)
    pipe.relay_until(lambda: child.poll() is not None, pidfd, log)
    pipe.close()
    assert child.returncode == 1
    assert not (tmp_path / "chief-0.pipe").exists()  # gone with the task
    lines = path.read_text().splitlines()
    assert lines[0] == "0" and lines[2999] == "2999" and lines[-1] == "Traceback: the end"


def test_output_without_room_is_dropped_counted_and_said(small_fs: Path) -> None:
    path = small_fs / "worker-1.log"
    log = TaskLog(str(path), 1 << 30)
    filler = small_fs / "filler"
    with open(filler, "wb", buffering=0) as f, pytest.raises(OSError):
        while True:
            f.write(b"\0" * 4096)
            f.flush()
    for _ in range(100):
        log.write(b"y" * 100 + b"\n")  # no room: nothing raises
    lost = log.lost
    assert lost > 0
    filler.unlink()
    log.write(b"after\n")
    assert path.read_text().endswith(
        f"==> tfctl: {lost} bytes of output lost: no room on the disk\nafter\n")
    assert log.lost == 0


def test_the_settings_and_their_defaults() -> None:
    job = parse_inventory(GOOD, "c.yaml").job
    assert (job.log_max_bytes, job.disk_floor_bytes) == (256 << 20, 1024 << 20)
    job = parse_inventory(GOOD + "  log_max_mb: 0.5\n  disk_floor_mb: 0\n", "c.yaml").job
    assert (job.log_max_bytes, job.disk_floor_bytes) == (512 << 10, 0)
    from tfctl.inventory.plan import make_plan

    plan = make_plan(parse_inventory(GOOD + "  log_max_mb: 2\n", "c.yaml"))
    assert task_manifest(plan.tasks[0], plan)["log_max_bytes"] == 2 << 20


def test_check_warns_below_the_floor() -> None:
    assert judge_room(None, 1 << 30) == [] and judge_room(2 << 30, 1 << 30) == []
    [(level, text)] = judge_room(300 << 20, 1 << 30)
    assert level == "warn"
    assert text.startswith("only 300 MB free in the workdir's filesystem, below "
                           "job.disk_floor_mb (1024 MB)")


def test_a_task_s_end_waits_for_room_to_be_recorded(small_fs: Path) -> None:
    """The supervisor's exit record on a full disk: written once there is room, no temp file
    left meanwhile (status and the job's end read the task's end from it)."""
    import threading

    filler = small_fs / "filler"
    with open(filler, "wb", buffering=0) as f, pytest.raises(OSError):
        while True:
            f.write(b"\0" * 4096)
    record = small_fs / "worker-0.exit.json"
    writer = threading.Thread(target=write_json_when_room,
                              args=(str(record), {"exit_code": 0, "pad": "x" * 8000}, 0.05))
    writer.start()
    writer.join(0.5)
    assert writer.is_alive() and not record.exists()
    assert [p.name for p in small_fs.iterdir()] == ["filler"]  # no temp file kept
    filler.unlink()
    writer.join(10)
    assert not writer.is_alive() and json.loads(record.read_text())["exit_code"] == 0


def test_a_task_s_end_is_recorded_at_once_in_the_room_kept_for_it(small_fs: Path) -> None:
    """The supervisor keeps a slot for the exit record while there is room: on a full disk
    the record is written into it in place and renamed, with no wait."""
    slot = reserve_slot(str(small_fs / "ps-0.exit.slot"))
    assert slot is not None
    filler = small_fs / "filler"
    with open(filler, "wb", buffering=0) as f, pytest.raises(OSError):
        while True:
            f.write(b"\0" * 4096)
    record = small_fs / "ps-0.exit.json"
    write_json_when_room(str(record), {"exit_code": None, "signal": "SIGTERM"}, slot=slot)
    assert json.loads(record.read_text()) == {"exit_code": None, "signal": "SIGTERM"}
    assert sorted(p.name for p in small_fs.iterdir()) == ["filler", "ps-0.exit.json"]
