"""Ctrl-C, SIGTERM and a closing terminal (SIGHUP) to `tfctl up` (and Ctrl-C to `tfctl demo`)
at the moments that matter.

During sync, while the parameter servers start, while the workers start: `up` exits 130, says
what it cleaned, and nothing is left on any host — no task, no supervisor, no agent, no rsync
(each lab host's namespace holds only its sshd listener again) and no task port bound. The run
directories stay, with their logs, marked aborted by which signal. `tests/support/lightjob.py
--listen-delay S` makes a task take S seconds before it listens, like a TensorFlow server
importing TensorFlow.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.support.procs import alive, children_named
from tests.support.testbedtools import (
    Watched,
    bound_ports,
    ctrl_c_up,
    job_dir,
    processes_of_run,
    started_tasks,
    tfctl,
)
from tests.support.tmuxpane import Pane
from tfctl.remote.runs.current import state_file

pytestmark = pytest.mark.testbed


def busy_processes(testbed: Any) -> dict[str, list[str]]:
    """Per lab host, the command lines of everything besides its sshd listener."""
    found: dict[str, list[str]] = {}
    for host in testbed.names:
        keep = testbed.sshd_pid(host)
        for pid in testbed.pids_in(host):
            try:
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue  # gone since the listing
            if pid != keep:
                found.setdefault(host, []).append(f"{pid}: {cmd[:120]}")
    return found


def wait_hosts_idle(testbed: Any, timeout_s: float = 15) -> None:
    """Sessions take a moment to close after a client exits; then nothing may remain. When the
    suite runs with kept connections (TFCTL_TEST_PERSIST), they are closed first, as a user's
    `tfctl disconnect` does: the holder's idle agent sessions stay by design until then."""
    if os.environ.get("TFCTL_PERSIST", "0") != "0":
        subprocess.run([sys.executable, "-m", "tfctl.tui", "disconnect"], check=True,
                       capture_output=True, timeout=60)
    deadline = time.monotonic() + timeout_s
    while (busy := busy_processes(testbed)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert busy == {}, f"left running on the hosts: {busy}"


def assert_all_cleaned(testbed: Any, run_id: str, signal_words: str) -> None:
    assert processes_of_run(run_id) == {}
    wait_hosts_idle(testbed)
    assert bound_ports(testbed, {2222, 2223}) == {}
    for host in testbed.names:  # the run's logs are kept, the run is marked aborted, and why
        run_dir = testbed.host(host).workdir / ".tfctl" / "runs" / run_id
        assert list(run_dir.glob("*.log")), f"{host}: no logs kept in {run_dir}"
        finished = json.loads((run_dir / "finished.json").read_text())
        assert finished["status"] == {
            "state": "aborted", "cause": f"interrupted by {signal_words} before it was up"}


@pytest.fixture
def idle_lab(testbed):  # type: ignore[no-untyped-def]
    """The lab with nothing running on its hosts yet (else an earlier test left something)."""
    wait_hosts_idle(testbed)
    return testbed


def test_ctrl_c_during_sync_starts_nothing(idle_lab, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    testbed = idle_lab
    d = job_dir(tmp_path)
    data = d / "data"
    data.mkdir()
    for i in range(3000):  # enough files that rsync takes a while
        (data / f"f{i}.txt").write_text(f"{i}\n" * 20)
    inv = testbed.write_inventory(d / "cluster.yaml", {"script": "job.py", "style": "flags",
                                                   "args": ["--forever"]})
    w = Watched(["-i", str(inv), "up"], d)
    try:
        w.wait_for(lambda: bool(children_named(w.proc.pid, "rsync")), "rsync running")
        w.ctrl_c()
        assert w.finish() == 130, w.text
    finally:
        w.kill()
    assert "interrupted before any task was started: nothing to clean up" in w.text
    assert "Traceback" not in w.text and w.run_id is None
    wait_hosts_idle(testbed)  # no remote rsync, no agent
    assert children_named(w.proc.pid, "rsync") == []
    assert bound_ports(testbed, {2222, 2223}) == {}


def test_ctrl_c_while_ps_start_stops_them(idle_lab, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    testbed = idle_lab
    job = {"script": "job.py", "style": "flags",
           "args": ["--forever", "--listen-delay=30", "--delay-types=ps"]}
    inv = testbed.write_inventory(job_dir(tmp_path) / "cluster.yaml", job)
    # The ps would listen only after 30 s: `up` must not wait for them to roll back.
    w = ctrl_c_up(inv, lambda w: w.started("ps") == {"ps:0", "ps:1", "ps:2"},
                  "three ps processes", "--ps-first")
    assert "tfctl: interrupted: stopped ps:0, ps:1, ps:2" in w.text
    assert "starting worker" not in w.text and "Traceback" not in w.text
    assert_all_cleaned(testbed, str(w.run_id), "Ctrl-C (SIGINT)")


def test_sigterm_while_workers_start_stops_everything(idle_lab, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    testbed = idle_lab
    job = {"script": "job.py", "style": "flags",
           "args": ["--forever", "--listen-delay=30", "--delay-types=worker"]}
    inv = testbed.write_inventory(job_dir(tmp_path) / "cluster.yaml", job)
    w = Watched(["-i", str(inv), "up"], inv.parent)
    try:
        w.wait_for(lambda: len(w.started("worker")) == 3, "three workers")
        w.proc.send_signal(signal.SIGTERM)  # to tfctl alone, as `kill` or a CI timeout does
        run_dir = testbed.host("h1").workdir / ".tfctl" / "runs" / str(w.run_id)
        deadline = time.monotonic() + 30
        while not any(run_dir.glob("*.stopped")) and w.proc.poll() is None \
                and time.monotonic() < deadline:
            time.sleep(0.01)
        if w.proc.poll() is None:  # the rollback is under way: impatience must not cut it short
            w.proc.send_signal(signal.SIGTERM)
        assert w.finish(timeout_s=20) == 130, w.text  # the workers would listen after 30 s
    finally:
        w.kill()
        tfctl(inv, "down", "--grace", "1")
    assert ("tfctl: interrupted: stopped ps:0, ps:1, ps:2, worker:0, worker:1, worker:2"
            in w.text)
    assert "Traceback" not in w.text and " is up" not in w.text
    assert_all_cleaned(testbed, str(w.run_id), "SIGTERM")


@pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux")
def test_terminal_closed_while_workers_start_stops_everything(idle_lab, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """`up` in a real terminal (a tmux pane) that closes, as an ssh session to the laptop that
    drops: the pty hangs up, SIGHUP. Same outcome as Ctrl-C: what the run started is stopped,
    though nobody reads the terminal (writes to it fail from then on), and `tfctl runs` says
    why the run ended."""
    testbed = idle_lab
    job = {"script": "job.py", "style": "flags",
           "args": ["--forever", "--listen-delay=30", "--delay-types=worker"]}
    inv = testbed.write_inventory(job_dir(tmp_path) / "cluster.yaml", job)
    runs = testbed.host("h1").workdir / ".tfctl" / "runs"
    before = set(runs.iterdir()) if runs.is_dir() else set()
    script = tmp_path / "up.sh"  # the suite's environment, in the terminal's shell
    exports = "".join(f"export {k}={shlex.quote(v)}\n" for k, v in os.environ.items()
                      if k.isidentifier())
    script.write_text(f"{exports}cd {shlex.quote(str(inv.parent))}\n"
                      f"exec {shlex.quote(sys.executable)} -m tfctl.tui -i "
                      f"{shlex.quote(str(inv))} up\n")
    pane = Pane(f"sh {shlex.quote(str(script))}", name="tfctl-hup")
    run_id = ""
    try:
        pid = pane.pid()
        deadline = time.monotonic() + 90
        while not (run_id and len(started_tasks(run_id, "worker")) == 3):
            assert alive(pid) and time.monotonic() < deadline, f"no three workers:\n{pane.text()}"
            new = set(runs.iterdir()) - before if runs.is_dir() else set()
            run_id = new.pop().name if new else ""
            time.sleep(0.05)
        assert " is up" not in pane.text()
        pane.close()  # the terminal closes: SIGHUP to `up`
        deadline = time.monotonic() + 30  # the workers would listen after 30 s
        while alive(pid):
            assert time.monotonic() < deadline, "up still runs 30 s after its terminal closed"
            time.sleep(0.05)
    finally:
        pane.close()
        tfctl(inv, "down", "--grace", "1")
    assert_all_cleaned(testbed, run_id, "SIGHUP: its terminal closed")
    listed = tfctl(inv, "runs")
    line = next(x for x in listed.stdout.splitlines() if x.startswith(run_id))
    assert line.endswith("aborted: interrupted by SIGHUP: its terminal closed before it was up")


@pytest.mark.tf
def test_ctrl_c_to_demo_once_up_leaves_nothing(tmp_path: Path) -> None:
    demo_dir = tmp_path / "demo"
    w = Watched(["demo", "--no-ui", "--steps", "1000", "--dir", str(demo_dir)], tmp_path)
    try:
        w.wait_for(lambda: any(" is up" in line for line in w.err), "demo is up", 240)
        state = Path(state_file(str(demo_dir / "cluster.yaml"), "demo"))
        run_id = json.loads(state.read_text())["run_id"]
        assert started_tasks(run_id, "") >= {"ps:0", "worker:0"}
        w.ctrl_c()
        assert w.finish() == 130, w.text
    finally:
        w.kill()
    assert "demo: interrupted" in w.text and "Traceback" not in w.text
    stopped = next(line for line in w.err if line.startswith("demo: stopped "))
    assert {"ps:0", "worker:0"} <= set(stopped.removeprefix("demo: stopped ").strip().split(", "))
    assert "down: nothing of the demo is left running" in w.text
    assert processes_of_run(run_id) == {}
