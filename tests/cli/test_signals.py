"""Signals as the shell gave them (README: Signals are taken as the shell gave them): started
with SIGINT and SIGHUP ignored, as `nohup`, a non-interactive shell's `&` and some CI runners
start a command, tfctl's long-running commands keep them ignored, and SIGTERM ends each cleanly:
exit 130, one line, nothing it started left running."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.localcluster import local_cluster, run_tfctl
from tests.support.testbedtools import wait_until
from tests.support.tmuxpane import Pane


def as_under_nohup() -> None:
    for sig in (signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)


def descendants(pid: int) -> set[int]:
    """Every live process below `pid` (from /proc's parent links)."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            parents[int(entry)] = int(stat.rsplit(")", 1)[1].split()[1])
    found, frontier = set(), {pid}
    while frontier:
        frontier = {p for p, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


def alive(pids: set[int]) -> set[int]:
    return {p for p in pids if Path(f"/proc/{p}").exists()
            and "Z" not in Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()[:1]}


@pytest.fixture
def running(tmp_path: Path) -> Path:
    """A run of the light job serving until stopped, on one `transport: local` host."""
    inv = local_cluster(tmp_path, {"a": {"ps": 0}}, job={"style": "tf_config"})
    up = run_tfctl(inv, "up")
    assert up.returncode == 0, up.stdout + up.stderr
    yield inv
    run_tfctl(inv, "down", "--grace", "1")


@pytest.mark.parametrize("command", [("logs", "-f"), ("wait",)])
def test_sigterm_ends_a_following_command_that_ignores_ctrl_c(running: Path,
                                                             command: tuple[str, ...]) -> None:
    proc = subprocess.Popen([sys.executable, "-m", "tfctl.tui", "-i", str(running), *command],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=running.parent, preexec_fn=as_under_nohup)
    try:
        started = wait_until("its session with the host", lambda: descendants(proc.pid), 30)
        proc.send_signal(signal.SIGINT)
        proc.send_signal(signal.SIGHUP)
        time.sleep(1)
        assert proc.poll() is None  # ignored, as it was given
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130, err
    assert err.endswith("interrupted (SIGTERM)\n") and "Traceback" not in err, err
    wait_until("the processes it started to end", lambda: not alive(started), 10)


@pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux (a real terminal)")
def test_sigterm_ends_the_dashboard_and_gives_the_terminal_back(running: Path) -> None:
    pane = Pane(f"(trap '' INT HUP; exec {sys.executable} -m tfctl.tui -i {running} ui); "
                "echo EXITED $?; sleep 60", env={"PATH": os.environ["PATH"]}, name="tfctl-term")
    try:
        pane.wait("the dashboard", lambda screen: "worker:0" in screen, timeout_s=90)
        tfctl = next(pid for pid in descendants(pane.pid())
                     if Path(f"/proc/{pid}/cmdline").read_bytes().startswith(
                         sys.executable.encode() + b"\0-m\0tfctl.tui"))
        os.kill(tfctl, signal.SIGTERM)
        screen = pane.wait("the shell after the dashboard", lambda s: "EXITED" in s, 30)
        assert "interrupted (SIGTERM)" in screen and "EXITED 130" in screen, screen
        alternate = pane.tmux("display-message", "-p", "-t", pane.session, "#{alternate_on}")
        assert alternate.stdout.strip() == "0"  # the terminal is the shell's again
    finally:
        pane.close()
