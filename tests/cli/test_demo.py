"""`tfctl demo`: a real local cluster trains the bundled example, then is gone, however its
terminal ends (`--no-ui` to the end; its dashboard in tmux, the tmux server killed)."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.support.testbedtools import processes_of_run, wait_until
from tests.support.tmuxpane import Pane
from tfctl.remote.runs.current import state_file
from tfctl.remote.runs.notices import FOLDED, is_notice

pytestmark = pytest.mark.tf


def test_demo_runs_to_completion_and_leaves_nothing(tmp_path: Path) -> None:
    demo_dir = tmp_path / "demo"
    proc = subprocess.run([sys.executable, "-m", "tfctl.tui", "demo", "--no-ui", "--steps", "30",
                           "--dir", str(demo_dir)], capture_output=True, text=True, timeout=300,
                          cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    # the classic async flags style may overshoot the last step by one or two
    steps = re.search(r"result: (\d+) steps, loss [\d.]+, accuracy [\d.]+", proc.stdout)
    assert steps and 30 <= int(steps.group(1)) <= 33, proc.stdout[-2000:]
    assert list((demo_dir / "out" / "ckpt").glob("ckpt-*.index")), "no checkpoint written"
    assert list((demo_dir / "out").rglob("events.out.tfevents.*")), "no TensorBoard events"
    # the start-up notices of TensorFlow and TensorBoard folded: one line per task at most
    followed = [line.split(" | ", 1)[-1] for line in proc.stdout.splitlines()]
    assert not [line for line in followed if is_notice(line)], proc.stdout[-3000:]
    assert followed.count(FOLDED) <= 4, proc.stdout[-3000:]
    state = json.loads(Path(state_file(str(demo_dir / "cluster.yaml"), "demo")).read_text())
    assert processes_of_run(state["run_id"]) == {}
    # nothing written outside the demo folder
    assert sorted(p.name for p in tmp_path.iterdir()) == ["demo"]
    # the inventory it wrote is an ordinary one: `tfctl plan` reads it
    plan = subprocess.run([sys.executable, "-m", "tfctl.tui", "-i", str(demo_dir / "cluster.yaml"),
                           "plan", "--json"], capture_output=True, text=True, check=True)
    tasks = [t["name"] for t in json.loads(plan.stdout)["tasks"]]
    assert tasks[:3] == ["ps:0", "worker:0", "worker:1"]


def _demo_processes(demo_dir: Path, run_id: str | None) -> dict[int, str]:
    """Every live process of the demo: its run's (tagged with its id: ps, workers, TensorBoard
    and its data server) and any other naming its folder (the demo itself, the hosts'
    supervisors and watchers); pid → command line."""
    found = {pid: "" for pid in (processes_of_run(run_id) if run_id else {})}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
                state = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[0]
            except OSError:
                continue
            if state != "Z" and (int(entry) in found or str(demo_dir).encode() in cmdline):
                found[int(entry)] = cmdline.replace(b"\0", b" ").decode(errors="replace")
    return found


def _port_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("0.0.0.0", port))
        except OSError:
            return False
    return True


def _tasks(run_id: str) -> set[str]:
    return {env.get("TFCTL_TASK", "") for env in processes_of_run(run_id).values()}


@pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux (a real terminal)")
@pytest.mark.parametrize("when", ["mid-run", "after the end"])
def test_closing_the_demos_terminal_stops_everything_it_started(tmp_path: Path,
                                                                 when: str) -> None:
    """The demo's dashboard in tmux, whose server is killed (SIGHUP to the demo) while the job
    trains, or once it has ended (TensorBoard still serving): nothing of the demo is left
    running, and TensorBoard's port is free."""
    demo_dir = tmp_path / "demo"
    steps = 100000 if when == "mid-run" else 20
    pane = Pane(f"{sys.executable} -m tfctl.tui demo --ui --steps {steps} --dir {demo_dir}",
                env={"PATH": os.environ["PATH"]}, name="tfctl-demo")
    run_id = None
    try:
        state = Path(state_file(str(demo_dir / "cluster.yaml"), "demo"))
        run_id = wait_until("the demo's run", lambda: state.exists() and json.loads(
            state.read_text())["run_id"], 180)
        inventory = yaml.safe_load((demo_dir / "cluster.yaml").read_text())
        port = inventory["job"]["tensorboard"]["port"]
        pane.wait("the dashboard", lambda screen: "worker:0" in screen, timeout_s=120)
        if when == "mid-run":
            wait_until("its workers and TensorBoard", lambda: {
                "worker:0", "worker:1", "tensorboard:0"} <= _tasks(run_id), 60)
        else:
            wait_until("the end of training, TensorBoard still serving", lambda: _tasks(
                run_id) == {"tensorboard:0"}, 180)
        assert not _port_free(port)
        pane.close()  # the terminal is gone: SIGHUP
        wait_until("no process of the demo", lambda: not _demo_processes(demo_dir, run_id), 60)
        assert _port_free(port)
    finally:
        pane.close()
        left = _demo_processes(demo_dir, run_id)
        for pid in left:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    assert not left, left
