"""`tfctl ssh HOST|TASK [-- CMD…]` on real sshd hosts: the exit status passed
through, the workdir, a task's planned environment, the host-key policy, a real pty, and the
dashboard's `x` in a real terminal (tmux)."""

from __future__ import annotations

import json
import os
import pty
import select
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.testbedtools import job_dir, tfctl
from tests.support.tmuxpane import Pane
from tfctl.inventory.load import load_inventory
from tfctl.inventory.plan import make_plan

pytestmark = pytest.mark.testbed

JOB = {"script": "job.py", "strategy": "parameter_server", "chief": "h1"}


@pytest.fixture
def inventory(testbed, tmp_path: Path) -> Path:  # type: ignore[no-untyped-def]
    for name in ("h1", "h2"):
        testbed.host(name).workdir.mkdir(parents=True, exist_ok=True)
    return testbed.write_inventory(job_dir(tmp_path) / "cluster.yaml", JOB, hosts=["h1", "h2"],
                               gpus={"h1": [0], "h2": [0, 1]}, ps={"h1": 1, "h2": 0})


def test_a_command_runs_in_the_workdir_and_its_exit_status_comes_back(
        testbed, inventory: Path) -> None:  # type: ignore[no-untyped-def]
    proc = tfctl(inventory, "ssh", "h2", "--", "sh", "-c",
                 'pwd; hostname; echo "to stderr" >&2; exit 7')
    assert proc.returncode == 7, proc.stdout + proc.stderr
    where, name = proc.stdout.split()
    assert Path(where).resolve() == testbed.host("h2").workdir.resolve()
    if testbed.isolated:
        assert name == "h2"
    assert proc.stderr == "to stderr\n"  # no pty through a pipe: stderr kept apart
    assert tfctl(inventory, "ssh", "h1", "--", "true").returncode == 0


def test_stdin_reaches_the_command(inventory: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "tfctl.tui", "-i", str(inventory), "ssh", "h1",
                           "--", "wc", "-l"], input="a\nb\nc\n", capture_output=True, text=True,
                          timeout=60)
    assert (proc.returncode, proc.stdout.strip()) == (0, "3")


def test_a_task_gets_its_folder_and_its_planned_environment(testbed, inventory: Path) -> None:  # type: ignore[no-untyped-def]
    plan = make_plan(load_inventory(str(inventory)))
    task = plan.task("worker:2")  # h2's second GPU
    assert task.host == "h2"
    proc = tfctl(inventory, "ssh", "worker:2", "--", "python3", "-c",
                 "import json, os; print(json.dumps({'cwd': os.getcwd(), 'env': dict("
                 "os.environ)}))")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    seen = json.loads(proc.stdout)
    assert Path(seen["cwd"]).resolve() == testbed.host("h2").workdir.resolve()
    assert seen["env"]["CUDA_VISIBLE_DEVICES"] == "1"
    assert json.loads(seen["env"]["TF_CONFIG"]) == json.loads(task.env["TF_CONFIG"])
    assert json.loads(seen["env"]["TF_CONFIG"])["task"] == {"type": "worker", "index": 2}
    # Never the run's tags: `tfctl down` finds a run's processes by them.
    assert "TFCTL_RUN_ID" not in seen["env"] and "TFCTL_TASK" not in seen["env"]


def test_an_unknown_name_is_one_sentence_and_exit_2(inventory: Path) -> None:
    proc = tfctl(inventory, "ssh", "nosuch", "--", "true")
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
    assert "no host or task named 'nosuch'" in proc.stderr and "worker:0" in proc.stderr


def test_the_host_key_policy_holds(testbed, tmp_path: Path, healed) -> None:  # type: ignore[no-untyped-def]
    testbed.host("h1").workdir.mkdir(parents=True, exist_ok=True)
    known = tmp_path / "known_hosts"
    known.write_text("")
    inv = testbed.write_inventory(job_dir(tmp_path) / "cluster.yaml", JOB, hosts=["h1"],
                              known_hosts=str(known))
    proc = tfctl(inv, "ssh", "h1", "--", "echo", "reached")
    assert proc.returncode == 1 and "reached" not in proc.stdout
    assert "is not in" in proc.stderr and "refused" in proc.stderr
    shutil.copy(testbed.known_hosts, known)
    testbed.regenerate_host_key("h1")
    proc = tfctl(inv, "--accept-new-host-keys", "ssh", "h1", "--", "echo", "reached")
    assert proc.returncode == 1 and "has CHANGED" in proc.stderr and "reached" not in proc.stdout


def read_until(fd: int, marker: bytes, timeout_s: float = 30.0) -> bytes:
    seen, deadline = b"", time.monotonic() + timeout_s
    while marker not in seen:
        if time.monotonic() > deadline:
            raise AssertionError(f"{marker!r} not seen; got {seen[-500:]!r}")
        if select.select([fd], [], [], 0.2)[0]:
            try:
                seen += os.read(fd, 65536)
            except OSError:  # the child closed the terminal
                break
    return seen


def test_a_terminal_gets_an_interactive_login_shell_with_a_pty(inventory: Path) -> None:
    """The path a user at a terminal takes: a pty on the host, the local tty in raw mode."""
    parent, child = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "tfctl.tui", "-i", str(inventory), "ssh",
                             "worker:1"], stdin=child, stdout=child, stderr=child,
                            env={**os.environ, "TERM": "xterm"}, start_new_session=True)
    os.close(child)
    try:
        os.write(parent, b"tty -s && echo IS-A-TTY; echo mask=$CUDA_VISIBLE_DEVICES-$((6*7))\n")
        seen = read_until(parent, b"mask=0-42")  # worker:1 is h2's first GPU
        assert b"IS-A-TTY" in seen
        os.write(parent, b"exit 5\n")
        assert proc.wait(timeout=30) == 5
    finally:
        if proc.poll() is None:
            proc.kill()
        os.close(parent)


@pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux")
def test_the_dashboard_key_opens_a_shell_and_comes_back(testbed, inventory: Path) -> None:  # type: ignore[no-untyped-def]
    """`x` in `tfctl ui` in a real terminal: the app suspends, the shell runs in the selected
    task's place (the tasks table has the focus at start: ps:0 on h1) with its environment, and
    after `exit` the dashboard is back."""
    pane = Pane(f"{sys.executable} -m tfctl.tui -i {inventory} ui",
                env={"HOME": os.environ.get("HOME", "/root")}, name="tfctl-ssh")

    def wait(check: str) -> str:
        return pane.wait(f"{check!r} on screen", lambda text: check in text)

    try:
        wait("Hosts")
        wait(testbed.address("h1"))
        pane.keys("x")
        wait("returns to the dashboard")
        pane.keys("echo shell-on-$(basename $(pwd))-${TF_CONFIG:+tf}-$((6*7))", "Enter")
        text = wait("shell-on-work-tf-42")
        assert "tfctl: a shell on h1 for ps:0" in text
        pane.keys("exit 3", "Enter")
        wait("ended (exit 3)")
        wait("Hosts")
    finally:
        pane.close()
