"""Live progress (`tfctl.tui.progress`): one row per host, what it waits for, for how long.

The rows are driven here by the same event lines and hooks `up`, `setup`, `sync` and `down`
give them, with a fake clock, and drawn by rich on a forced terminal; then `tfctl up` runs for
real in tmux (a terminal) on a `transport: local` host whose tasks take 4 s to listen: the row
and its growing time are on screen while it waits, and when it ends every plain line is there.
Without a terminal the lines are exactly the plain ones (no rows, no escape codes).
"""

from __future__ import annotations

import io
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from rich.console import Console

from tests.support.localcluster import local_cluster, run_tfctl
from tfctl.tui.progress import LiveView, Rows, Steps, render


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def screen(rows: Rows, title: str = "tfctl up") -> str:
    out = io.StringIO()
    Console(file=out, force_terminal=True, width=100, color_system=None).print(
        render(rows, title))
    return out.getvalue()


def find_row(text: str, host: str) -> re.Match[str] | None:
    return re.search(rf"^(…|✔|✖) {host} +(.*?) +(\d+\.\d) s *$", text, re.M)


def row(text: str, host: str) -> tuple[str, str, str]:
    """(mark, what, seconds) of `host`'s row on the screen."""
    found = find_row(text, host)
    assert found is not None, f"no row for {host}:\n{text}"
    return found.group(1), found.group(2), found.group(3)


def test_up_rows_follow_the_steps_with_their_times() -> None:
    clock = Clock()
    rows = Rows(clock)
    steps = Steps(rows, ["a", "b"], ["sync", "setup", "gpus"],
                  {"ps:0": "a", "worker:0": "a", "worker:1": "b"}, ["a", "b"])
    assert row(screen(rows), "a")[1] == "sync: comparing files"
    clock.now += 0.4
    steps.event("sync a: unchanged")
    clock.now += 0.6
    shown = screen(rows)
    assert row(shown, "a") == ("✔", "sync: unchanged", "0.4")
    assert row(shown, "b") == ("…", "sync: comparing files", "1.0")
    steps.step_ended("sync")
    steps.event("setup b: [1/2] pip install -r requirements.txt")
    clock.now += 2.5
    assert row(screen(rows), "b") == (
        "…", "setup [1/2] pip install -r requirements.txt", "2.5")
    steps.event("setup a: inputs unchanged: skipped")
    steps.step_ended("setup")
    assert row(screen(rows), "b")[1] == "checking its GPUs are free"
    steps.run_started("20261124-1")
    assert row(screen(rows), "a")[1] == "preparing run 20261124-1"
    steps.event("starting ps:0, worker:0, worker:1")
    clock.now += 3.2
    shown = screen(rows)
    assert row(shown, "a") == (
        "…", "starting ps:0, worker:0 (until they listen)", "3.2")
    assert row(shown, "b") == (
        "…", "starting worker:1 (until it listens)", "3.2")
    clock.now += 1.0
    assert row(screen(rows), "b")[2] == "4.2"
    assert "tfctl up" in shown and shown.count("\n") == 3  # the title and one row per host


def test_ps_first_rows_say_who_waits_for_the_parameter_servers() -> None:
    rows = Rows(Clock())
    steps = Steps(rows, ["a", "b"], ["gpus"], {"ps:0": "a", "worker:0": "b"}, ["a", "b"])
    steps.run_started("r")
    steps.event("starting ps:0")
    shown = screen(rows)
    assert row(shown, "a")[1] == "starting ps:0 (until it listens)"
    assert row(shown, "b")[1] == "waiting for the parameter servers to listen"
    steps.event("starting worker:0")
    shown = screen(rows)
    assert row(shown, "a")[:2] == ("✔", "listening")
    assert row(shown, "b")[1] == "starting worker:0 (until it listens)"


def test_a_failed_step_marks_its_hosts_and_stops_there() -> None:
    rows = Rows(Clock())
    steps = Steps(rows, ["a", "b"], ["sync", "setup"])
    steps.host_event("sync", "a", "3 files, 120 bytes")
    steps.step_ended("sync", failed=["b"])
    shown = screen(rows, "tfctl setup")
    assert row(shown, "a")[:2] == ("✔", "sync: 3 files, 120 bytes")
    assert row(shown, "b")[:2] == ("✖", "sync failed")
    steps.event("setup a: [1/1] exited 3")
    assert row(screen(rows), "a")[:2] == ("✖", "setup [1/1] exited 3")


def test_down_rows_name_the_run_and_how_it_stops() -> None:
    rows = Rows(Clock())
    Steps(rows, [], ()).event("stopping run R1 on h1, h3 (TERM, then KILL after 10 s)")
    shown = screen(rows, "tfctl down")
    for host in ("h1", "h3"):
        assert row(shown, host)[1] == "stopping run R1: TERM, then KILL after 10 s"
    assert find_row(shown, "h2") is None


def test_live_view_prints_lines_above_and_leaves_only_them() -> None:
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=80, color_system=None)
    rows = Rows()
    rows.begin("h1", "starting worker:0")
    with LiveView(rows, "tfctl up", console) as view:
        view.print_above("\x1b[36mtfctl: \x1b[0mstarting worker:0")
        time.sleep(0.3)
    text = out.getvalue()
    assert "tfctl: starting worker:0" in text and "\x1b[36m" not in text  # colour system off
    assert "h1" in text  # the row was drawn, then erased (transient)


def tmux(*args: str, server: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["tmux", "-L", server, *args], capture_output=True, text=True,
                          timeout=30)


@pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux")
def test_up_in_a_terminal_shows_a_row_with_a_growing_time(tmp_path: Path) -> None:
    inv = local_cluster(tmp_path, {"a": {"ps": 1}},
                        job={"args": ["--forever", "--listen-delay=4"]})
    server = f"tfctl-progress-{os.getpid()}"
    env = f"PYTHONPATH={shlex.quote(os.environ.get('PYTHONPATH', ''))} TERM=xterm-256color"
    command = (f"cd {shlex.quote(str(inv.parent))} && env -u NO_COLOR {env} "
               f"{shlex.quote(sys.executable)} -m tfctl.tui -i {shlex.quote(str(inv))} up; "
               "echo EXITED $?; sleep 60")
    started = tmux("new-session", "-d", "-s", "up", "-x", "160", "-y", "40", command,
                   server=server)
    assert started.returncode == 0, started.stderr
    waiting = re.compile(r"… a +starting ps:0, worker:0 \(until they listen\) +(\d+\.\d) s")
    times: list[float] = []
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            pane = tmux("capture-pane", "-p", "-t", "up", server=server).stdout
            if "EXITED" in pane:
                break
            found = waiting.search(pane)
            if found:
                times.append(float(found.group(1)))
            time.sleep(0.4)
        assert len(set(times)) >= 2 and times == sorted(times), (times, pane)
        assert "EXITED 0" in pane, pane
        up_line = re.search(r"^run (\S+) is up", pane, re.M)
        assert up_line, pane
        run_id = up_line.group(1)
        for line in ("tfctl: sync a: ", f"tfctl: run {run_id}\n", "tfctl: starting ps:0, worker:0",
                     "ps:0 ", "worker:0 "):
            assert line in pane, (line, pane)
        assert not waiting.search(pane)  # the rows are gone once it is up
    finally:
        tmux("kill-server", server=server)
        run_tfctl(inv, "down", "--grace", "1")


def test_without_a_terminal_the_lines_are_the_plain_ones(tmp_path: Path) -> None:
    inv = local_cluster(tmp_path, {"a": {"ps": 1}}, job={"setup": ["true"]})
    up = run_tfctl(inv, "up")
    try:
        assert up.returncode == 0, up.stderr
        run_id = up.stdout.split("run ", 1)[1].split()[0]
        assert up.stderr.splitlines() == [
            "tfctl: sync a: 2 files, " + up.stderr.split("tfctl: sync a: 2 files, ")[1]
            .splitlines()[0],
            "tfctl: setup a: [1/1] true",
            "tfctl: setup: 1 ran, 0 skipped, 0 failed in "
            + up.stderr.split("failed in ")[1].splitlines()[0],
            f"tfctl: run {run_id}",
            "tfctl: starting ps:0, worker:0"]
        assert "\x1b" not in up.stdout + up.stderr
    finally:
        down = run_tfctl(inv, "down", "--grace", "1")
    assert down.stderr == "" and "\x1b" not in down.stdout
