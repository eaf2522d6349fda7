"""Signals as the shell gave them (README: Signals are taken as the shell gave them): started
with SIGINT and SIGHUP ignored, as `nohup`, a non-interactive shell's `&` and some CI runners
start a command, tfctl's long-running commands keep them ignored, and SIGTERM ends each cleanly:
exit 130, one line, nothing it started left running. And Ctrl-C at any moment of a start,
its imports included, is one line and exit 130, never a traceback."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from tests.support.localcluster import local_cluster, run_tfctl
from tests.support.signals import from_a_terminal
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


MOMENTS_S = (0.0, 0.005, 0.01, 0.015, 0.02, 0.03, 0.04, 0.05, 0.065, 0.08, 0.1, 0.12, 0.15,
             0.18, 0.22, 0.27, 0.33, 0.4, 0.5, 0.6, 0.75, 0.9)
"""When Ctrl-C comes after the start, each moment once for each command (66 tries)."""
FRAME = re.compile(r'^  File "([^"]+)", line \d+, in ', re.M)
SITE_PTH = re.compile(r"^Error processing line \d+ of .*?^Remainder of file ignored\n",
                      re.M | re.S)


def before_tfctl(err: str, script: Path) -> bool:
    """`err` is the interpreter's own report of a KeyboardInterrupt before the first line of
    tfctl's code ran, which no Python code can catch: a fatal error of its start (its
    streams, `site`, the environment's .pth files), or a traceback whose frames are only the
    interpreter's and the program's import of tui/entry.py (the console script's or
    `python -m`'s)."""
    if re.search(r"^Fatal Python error: init_\w+", err, re.M):
        return True
    frames = FRAME.findall(err)
    return "Traceback" in err and bool(frames) and all(
        f.startswith("<") or f == str(script) or f.endswith(("tui/entry.py", "tui/__main__.py"))
        for f in frames)


def test_ctrl_c_at_any_moment_from_the_start_ends_quietly(tmp_path: Path) -> None:
    """`status`, `lab` and `runs`, sent SIGINT at many moments from 0 s on: each ends with
    `interrupted` and exit 130 (the start-up imports included: tui/entry.py), or had finished
    with its own exit status; never a traceback from tfctl. A signal that lands while the
    interpreter itself starts (before it sets its handler: it ends silently, -SIGINT; in its
    `site` import: Python's own fatal error) is counted apart."""
    inv = local_cluster(tmp_path, {"a": {"ps": 0}})
    script = Path(sys.executable).with_name("tfctl")
    programs = ([[str(script)]] if script.exists() else []) + [
        [sys.executable, "-m", "tfctl.tui"]]
    commands = ("status", "lab", "runs")
    finished = {c: run_tfctl(inv, c) for c in commands}  # each let finish
    assert not [c for c, done in finished.items() if "Traceback" in done.stdout + done.stderr]
    own = {c: done.returncode for c, done in finished.items()}
    tally: Counter[str] = Counter()
    wrong = []
    for i, moment in enumerate(MOMENTS_S):
        for j, command in enumerate(commands):
            argv = [*programs[(i + j) % len(programs)], "-i", str(inv), command]
            proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                    text=True, cwd=inv.parent, preexec_fn=from_a_terminal)
            time.sleep(moment)
            proc.send_signal(signal.SIGINT)
            out, err = proc.communicate(timeout=60)
            err = SITE_PTH.sub("", err)  # site's report of a .pth file it stopped reading
            if proc.returncode == 130 and err.endswith("interrupted\n") and \
                    "Traceback" not in out + err:
                tally["interrupted, exit 130"] += 1
                tally[command] += 1
            elif proc.returncode == own[command] and "Traceback" not in out + err:
                tally["had finished"] += 1
            elif proc.returncode == -signal.SIGINT and not out + err:
                tally["ended by SIGINT before the interpreter's handler"] += 1
            elif before_tfctl(err, script):
                tally["in the interpreter's own start"] += 1
            else:
                wrong.append(f"{' '.join(argv[-2:])} at {moment} s: exit {proc.returncode}\n"
                             f"{out}{err}")
    print(f"{len(MOMENTS_S) * len(commands)} tries: {dict(tally)}")
    assert not wrong, "\n".join(wrong)
    assert all(tally[c] for c in commands), tally  # each was interrupted by tfctl at least once
