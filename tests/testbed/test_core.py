"""The core loop on real sshd hosts with a light job: up (and up --exclude), status, logs, down,
rollback, sync."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from tests.support.testbedtools import (
    FOREVER,
    cmdline_of,
    job_dir,
    processes_of_run,
    run_id_from,
    run_tagged_pids,
    status_json,
    tfctl,
)
from tfctl.remote.runs.current import state_file

pytestmark = pytest.mark.testbed


def _up(inv: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    proc = tfctl(inv, "up", *extra)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


def test_up_status_down_matches_plan_exactly(testbed, tmp_path: Path, down_after) -> None:  # type: ignore[no-untyped-def]
    inv = testbed.write_inventory(job_dir(tmp_path) / "cluster.yaml", FOREVER,
                              gpus={"h1": 2, "h2": [1], "h3": 0}, ps={"h2": 0, "h3": 0})
    down_after.append(inv)
    plan = json.loads(tfctl(inv, "plan", "--json").stdout)
    run_id = run_id_from(_up(inv).stdout)
    procs = processes_of_run(run_id)
    tasks = {env["TFCTL_TASK"]: (pid, env) for pid, env in procs.items()}
    assert set(tasks) == {t["name"] for t in plan["tasks"]}
    for task in plan["tasks"]:
        pid, env = tasks[task["name"]]
        for key, value in task["env"].items():  # mask, TF_CONFIG, base env: exactly as planned
            assert env[key] == value, (task["name"], key)
        assert cmdline_of(pid)[1:] == task["argv"][1:]
        assert os.readlink(f"/proc/{pid}/cwd") == task["cwd"]
    st = status_json(inv)
    assert st["run_id"] == run_id
    assert {t["name"]: t["state"] for t in st["tasks"]} == {t["name"]: "running"
                                                           for t in plan["tasks"]}
    down = tfctl(inv, "down", "--grace", "2")
    assert down.returncode == 0, down.stderr
    assert "stopped" in down.stdout
    assert processes_of_run(run_id) == {}
    for host in testbed.names:  # no task port still bound anywhere
        assert ":2223" not in testbed.run(host, "ss -Hltn").stdout
    again = tfctl(inv, "down")
    assert again.returncode == 0 and "nothing to stop" in again.stdout


def test_job_end_stops_ps_and_wait_returns_status(testbed, tmp_path: Path, down_after) -> None:  # type: ignore[no-untyped-def]
    job = {"script": "job.py", "style": "flags", "args": ["--steps=3"]}
    inv = testbed.write_inventory(job_dir(tmp_path) / "cluster.yaml", job)
    down_after.append(inv)
    proc = tfctl(inv, "up", "--wait")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "finished with exit status 0" in proc.stderr
    run_id = run_id_from(proc.stdout)
    assert processes_of_run(run_id) == {}  # the ps (which never exit) were stopped
    logs = tfctl(inv, "logs", "-n", "50").stdout
    for i in range(3):
        assert f"worker:{i} | worker:{i} done" in logs


def test_task_dying_at_start_rolls_back_with_log_tail(testbed, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    job = {"script": "job.py", "style": "flags",
           "args": ["--forever", "--fail-at-start=3", "--fail-task=worker:2"]}
    inv = testbed.write_inventory(job_dir(tmp_path) / "cluster.yaml", job)
    proc = tfctl(inv, "up")
    assert proc.returncode == 1
    assert "worker:2 exited 3 at start" in proc.stderr
    assert "failing at start on purpose" in proc.stderr  # the task's own last log lines
    assert "stopped" in proc.stderr and "Traceback" not in proc.stderr
    time.sleep(0.5)
    for host in testbed.names:
        assert run_tagged_pids(testbed.pids_in(host)) == []


def test_busy_port_is_one_line_naming_host_and_port(testbed, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    # A port the inventory writes stays fixed: taken, it refuses the `up` (an unwritten one
    # would be chosen free: tests/testbed/test_two_runs.py).
    inv = testbed.write_inventory(job_dir(tmp_path) / "cluster.yaml",
                              {**FOREVER, "ports": {"ps": 2222, "worker": 2223}})
    holder = subprocess.Popen(["ip", "netns", "exec", testbed.host("h2").namespace, "python3", "-c",
                               "import socket,time; s=socket.socket();"
                               " s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1);"
                               " s.bind(('0.0.0.0',2223));"
                               " s.listen(); time.sleep(60)"]) if testbed.isolated else None
    if holder is None:
        pytest.skip("needs isolated hosts")
    try:
        _wait_listening(testbed, "h2", 2223)
        proc = tfctl(inv, "up")
        assert proc.returncode == 1
        err = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
        assert len(err) == 1 and "h2: port 2223 (for worker:1) is already in use" in err[0]
        assert f"pid {holder.pid}" in err[0] or "held by" in err[0]
    finally:
        holder.kill()
        holder.wait()


def _wait_listening(testbed, host: str, port: int) -> None:  # type: ignore[no-untyped-def]
    for _ in range(50):
        if f":{port} " in testbed.run(host, "ss -Hltn").stdout:
            return
        time.sleep(0.1)
    raise AssertionError("holder never listened")


def test_status_and_down_without_the_state_file(testbed, tmp_path: Path, down_after) -> None:  # type: ignore[no-untyped-def]
    inv = testbed.write_inventory(job_dir(tmp_path) / "cluster.yaml", FOREVER)
    down_after.append(inv)
    run_id = run_id_from(_up(inv).stdout)
    Path(state_file(str(inv), "lab")).unlink()
    st = status_json(inv)
    assert st["run_id"] == run_id and st["source"] == "hosts"
    assert tfctl(inv, "down", "--grace", "1").returncode == 0
    assert processes_of_run(run_id) == {}


@pytest.mark.parametrize("all_at_once", [False, True], ids=["ps-first", "all-at-once"])
def test_launch_order(testbed, tmp_path: Path, down_after, all_at_once: bool) -> None:  # type: ignore[no-untyped-def]
    """ps first: the workers start only once every ps listens. --all-at-once: they start in the
    same launch, while the parameter servers (listening 2 s late here) are not up yet."""
    job = dict(FOREVER, args=["--forever", "--listen-delay", "2", "--delay-types", "ps"])
    inv = testbed.write_inventory(job_dir(tmp_path) / "cluster.yaml", job, hosts=["h1", "h2"])
    down_after.append(inv)
    proc = _up(inv, *([] if all_at_once else ["--ps-first"]))  # all at once: the default
    starts = [line for line in proc.stderr.splitlines() if line.startswith("tfctl: starting")]
    assert len(starts) == (1 if all_at_once else 2), proc.stderr
    run_dir = testbed.host("h1").workdir / ".tfctl" / "runs" / run_id_from(proc.stdout)
    started = {name: json.loads((run_dir / f"{name}.pid.json").read_text())["started_at"]
               for name in ("ps-0", "worker-0")}
    gap = started["worker-0"] - started["ps-0"]
    assert (gap < 2.0) if all_at_once else (gap >= 2.0), gap  # 2.0: the ps's listen delay
    assert {t["state"] for t in status_json(inv)["tasks"]} == {"running"}


def test_second_up_refuses_while_live(testbed, tmp_path: Path, down_after) -> None:  # type: ignore[no-untyped-def]
    inv = testbed.write_inventory(job_dir(tmp_path) / "cluster.yaml", FOREVER)
    down_after.append(inv)
    _up(inv)
    proc = tfctl(inv, "up", "--no-sync")
    assert proc.returncode == 1
    assert "tfctl down" in proc.stderr


def test_resync_transfers_only_the_changed_file(testbed, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    d = job_dir(tmp_path)
    for i in range(20):
        (d / f"data{i}.txt").write_text(f"file {i}\n")
    (d / "ignored.log").write_text("x")
    (d / ".gitignore").write_text("*.log\n")
    inv = testbed.write_inventory(d / "cluster.yaml", FOREVER)
    first = tfctl(inv, "sync")
    assert first.returncode == 0, first.stderr
    time.sleep(1.1)  # a new mtime second
    (d / "data7.txt").write_text("changed\n")
    (d / "data7.txt").chmod(0o750)
    second = tfctl(inv, "sync")
    source = (d / "data7.txt").stat()
    for host in testbed.names:
        # One small file: sent over the agent's session, as rsync -a would leave it.
        assert f"{host}: agent 1 files, 8 bytes" in second.stdout, second.stdout
        workdir = testbed.host(host).workdir
        assert (workdir / "data7.txt").read_text() == "changed\n"
        copy = (workdir / "data7.txt").stat()
        assert (copy.st_mode, copy.st_mtime_ns) == (source.st_mode, source.st_mtime_ns)
        assert not (workdir / "ignored.log").exists()  # .gitignore honoured
    (d / "pkg").mkdir()
    (d / "pkg" / "new.py").write_text("x = 1\n")
    third = tfctl(inv, "sync")
    for host in testbed.names:  # a new folder is more than changed files: rsync sends it
        assert f"{host}: rsync 1 files, 6 bytes" in third.stdout, third.stdout
        assert (testbed.host(host).workdir / "pkg" / "new.py").read_text() == "x = 1\n"


def test_exec_groups_output_and_returns_worst_status(testbed, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    inv = testbed.write_inventory(job_dir(tmp_path) / "cluster.yaml", FOREVER)
    proc = tfctl(inv, "exec", "--", "sh", "-c", 'echo "on $(hostname -I)"; exit 0')
    assert proc.returncode == 0
    for host in testbed.names:
        assert f"── {host} (exit 0)" in proc.stdout
    bad = tfctl(inv, "exec", "--hosts", "h2", "--", "sh", "-c", "exit 3")
    assert bad.returncode == 3 and "── h2 (exit 3)" in bad.stdout


def test_unreachable_host_named_by_down_and_rest_stopped(testbed, tmp_path: Path, down_after,  # type: ignore[no-untyped-def]
                                                        healed) -> None:
    if not testbed.isolated:
        pytest.skip("needs the network-namespace lab")
    inv = testbed.write_inventory(job_dir(tmp_path) / "cluster.yaml", FOREVER)
    down_after.append(inv)
    run_id = run_id_from(_up(inv).stdout)
    testbed.cut("h3")
    proc = tfctl(inv, "--connect-timeout", "2", "down", "--grace", "1", timeout=60)
    assert proc.returncode == 1 and "h3" in proc.stderr
    left = {env["TFCTL_TASK"] for env in processes_of_run(run_id).values()}
    assert left == {"ps:2", "worker:2"}  # only what runs on the cut host
    testbed.heal("h3")
    assert tfctl(inv, "down", "--grace", "1").returncode == 0
    assert processes_of_run(run_id) == {}


def test_missing_python_is_one_sentence_for_check_and_up(testbed, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    inv = testbed.write_inventory(job_dir(tmp_path) / "cluster.yaml", FOREVER, hosts=["h1", "h2"],
                              host_fields={"h2": {"python": "/opt/no-such-venv/bin/python"}})
    check = tfctl(inv, "check")
    assert check.returncode == 1
    assert "h2: the inventory's `python:` does not exist there yet" in check.stdout
    up = tfctl(inv, "up")
    assert up.returncode == 1 and "Traceback" not in up.stderr
    assert "h2: " in up.stderr and "/opt/no-such-venv/bin/python" in up.stderr
    assert "rolled back" in up.stderr
    for host in ("h1", "h2"):
        assert run_tagged_pids(testbed.pids_in(host)) == []


def test_up_exclude_runs_on_the_rest_and_down_stops_it(testbed, tmp_path: Path, up_run) -> None:  # type: ignore[no-untyped-def]
    """`up --exclude`: the run lives on the other hosts only, `status` reads them, and `down`
    (with the whole inventory) stops exactly what was started."""
    inv = testbed.write_inventory(
        job_dir(tmp_path) / "cluster.yaml", FOREVER, ps={"h2": 0, "h3": 0}
    )
    run_id = up_run(inv, "--exclude", "h2").run_id
    status = status_json(inv)
    placed = {t["name"]: t["host"] for t in status["tasks"]}
    assert placed == {"ps:0": "h1", "worker:0": "h1", "worker:1": "h3"}
    assert all(t["state"] == "running" for t in status["tasks"])
    assert {env["TFCTL_TASK"] for env in processes_of_run(run_id).values()} == set(placed)
    runs_on_h2 = Path(testbed.host("h2").workdir) / ".tfctl" / "runs"  # the lab shares one disk
    assert not runs_on_h2.exists() or run_id not in [p.name for p in runs_on_h2.iterdir()]
    state = json.loads(Path(state_file(str(inv), "lab")).read_text())
    assert state["hosts"] == ["h1", "h3"]

    down = tfctl(inv, "down", "--grace", "1", "--json")
    assert down.returncode == 0, down.stderr
    summary = json.loads(down.stdout)
    assert summary["run_id"] == run_id and summary["clean"]
    assert sorted(summary["stopped"]) == sorted(placed)
    assert processes_of_run(run_id) == {}
