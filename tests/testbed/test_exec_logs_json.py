"""`tfctl exec --json` and `tfctl logs --json` on real sshd hosts (README: Machine-readable
output): exec prints one object with every host's exit status, stdout and stderr and exits with
the worst status; logs prints one object per line (task, host, line, read_at), and with `-f`
hands each line on while the task still writes them."""

from __future__ import annotations

import json
import queue
import signal
import subprocess
import sys
import threading
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from tests.support.signals import from_a_terminal
from tests.support.testbedtools import FOREVER, job_dir, processes_of_run, status_json, tfctl

pytestmark = pytest.mark.testbed

PER_HOST = ('echo "out from ${HOME%/home}"; echo "err" >&2; '
            'case "$HOME" in */h2/home) exit 3;; esac')
"""Each lab host has its own HOME (`<lab>/<host>/home`): h2 exits 3, the others 0."""


def test_exec_json_has_each_hosts_status_and_output_and_exits_with_the_worst(  # type: ignore[no-untyped-def]
        healed, tmp_path: Path) -> None:
    testbed = healed
    inv = testbed.write_inventory(job_dir(tmp_path) / "cluster.yaml", FOREVER)
    proc = tfctl(inv, "exec", "--json", "--", "sh", "-c", PER_HOST)
    assert proc.returncode == 3, proc.stderr
    data = json.loads(proc.stdout)  # one object, nothing else on stdout
    assert data["ok"] is False and data["exit_code"] == 3 and data["failed"] == {}
    assert list(data["hosts"]) == ["h1", "h2", "h3"]
    for name in ("h1", "h2", "h3"):
        assert data["hosts"][name] == {
            "exit_code": 3 if name == "h2" else 0,
            "stdout": f"out from {testbed.host(name).dir}\n", "stderr": "err\n"}
    assert data["command"] == f"sh -c '{PER_HOST}'"
    assert proc.stderr == ""

    fine = tfctl(inv, "exec", "--json", "--hosts", "h3,h1", "--", "true")
    assert fine.returncode == 0, fine.stderr
    assert json.loads(fine.stdout) == {
        "command": "true", "ok": True, "exit_code": 0, "failed": {},
        "hosts": {h: {"exit_code": 0, "stdout": "", "stderr": ""} for h in ("h3", "h1")}}

    testbed.stop_sshd("h3")  # a host that cannot be reached: in `failed`, and exit 1
    down = tfctl(inv, "--connect-timeout", "2", "exec", "--json", "--", "true", timeout=60)
    assert down.returncode == 1
    data = json.loads(down.stdout)
    assert list(data["hosts"]) == ["h1", "h2"] and list(data["failed"]) == ["h3"]
    assert data["exit_code"] == 1 and not data["ok"]
    assert down.stderr.startswith("error: h3: ") and down.stderr.count("\n") == 1, down.stderr
    assert "Traceback" not in down.stderr


def test_logs_json_is_one_object_per_line_with_its_task_and_host(  # type: ignore[no-untyped-def]
        testbed, tmp_path: Path, down_after) -> None:
    inv = testbed.write_inventory(
        job_dir(tmp_path) / "cluster.yaml", FOREVER, ps={"h2": 0, "h3": 0}
    )
    down_after.append(inv)
    assert tfctl(inv, "up").returncode == 0
    where = {t["name"]: t["host"] for t in status_json(inv)["tasks"]}
    assert set(where) == {"ps:0", "worker:0", "worker:1", "worker:2"}
    proc = tfctl(inv, "logs", "--json", "-n", "5")
    assert proc.returncode == 0, proc.stderr
    objects = [json.loads(line) for line in proc.stdout.splitlines()]
    assert {o["task"] for o in objects} == set(where)
    for o in objects:
        assert set(o) == {"task", "host", "line", "read_at"}
        assert o["host"] == where[o["task"]]
        assert datetime.fromisoformat(o["read_at"]).tzinfo is not None
    assert {"task": "worker:2", "host": "h3"}.items() <= next(
        o for o in objects if o["line"].startswith("worker:2 starting")).items()
    only = tfctl(inv, "logs", "--json", "worker:1")
    assert {json.loads(line)["task"] for line in only.stdout.splitlines()} == {"worker:1"}


def test_logs_follow_json_hands_on_each_line_while_the_task_runs(  # type: ignore[no-untyped-def]
        testbed, tmp_path: Path, down_after) -> None:
    job = {"script": "job.py", "style": "tf_config", "args": ["--steps=600", "--step_s=0.2"]}
    inv = testbed.write_inventory(job_dir(tmp_path) / "cluster.yaml", job, hosts=["h1"])
    down_after.append(inv)
    up = tfctl(inv, "up")
    assert up.returncode == 0, up.stdout + up.stderr
    run_id = status_json(inv)["run_id"]
    follow = subprocess.Popen(
        [sys.executable, "-m", "tfctl.tui", "-i", str(inv), "logs", "-f", "--json", "-n", "1",
         "worker:0"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        cwd=inv.parent, preexec_fn=from_a_terminal)  # Ctrl-C reaches it as from a terminal
    lines: queue.Queue[str] = queue.Queue()

    def read() -> None:
        for line in follow.stdout or ():
            lines.put(line)

    threading.Thread(target=read, daemon=True).start()
    try:
        first = _step_of(_next_step(lines))
        later = _step_of(_next_step(lines, after=first + 5))
        # Those lines came through the pipe while the worker is still training: each is
        # flushed as it is read, not when the follower ends.
        assert follow.poll() is None
        assert any(env.get("TFCTL_TASK") == "worker:0"
                   for env in processes_of_run(run_id).values())
        assert later > first
    finally:
        follow.send_signal(signal.SIGINT)
        try:
            _, err = follow.communicate(timeout=30)
        finally:  # one that does not end is ended: its agent session would outlive the test
            if follow.poll() is None:
                follow.kill()
                follow.communicate()
    assert follow.returncode == 130, err


def _next_step(lines: queue.Queue[str], after: int = 0, timeout_s: float = 60) -> dict[str, Any]:
    """The next `step N` line object with N above `after`, within `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while True:
        left = deadline - time.monotonic()
        assert left > 0, f"no step above {after} within {timeout_s:g} s"
        obj = json.loads(lines.get(timeout=left))
        assert obj["task"] == "worker:0" and obj["host"] == "h1", obj
        if obj["line"].startswith("step ") and _step_of(obj) > after:
            return obj


def _step_of(obj: dict[str, Any]) -> int:
    return int(obj["line"].split()[1])
