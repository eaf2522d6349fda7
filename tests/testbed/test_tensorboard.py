"""TensorBoard and the evaluator beside real training on the lab, reached through `tfctl
tensorboard` (the real CLI, a separate process) exactly as a user would."""

from __future__ import annotations

import contextlib
import json
import os
import queue
import re
import select
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.support.httpget import get, get_eventually
from tests.support.signals import from_a_terminal
from tests.support.testbed.testbed import Testbed
from tests.support.testbedtools import (
    environ_of,
    job_dir,
    kill_ssh_sessions,
    processes_of_run,
    run_id_from,
    status_json,
    tfctl,
    wait_until,
)

pytestmark = [pytest.mark.testbed, pytest.mark.timeout(600)]

EXAMPLES = Path(__file__).parents[2] / "examples"
URL_LINE = re.compile(r"TensorBoard on (\S+) .*: (http://127\.0\.0\.1:(\d+)/)")


class Cli:
    """`tfctl tensorboard` running in the background, its output read line by line."""

    def __init__(self, inventory: Path, *args: str):
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tfctl.tui", "-i", str(inventory), "tensorboard", *args],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            text=True, cwd=inventory.parent, preexec_fn=from_a_terminal)  # Ctrl-C reaches it
        self.lines: list[str] = []
        self._queue: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._queue.put(line.rstrip("\n"))
        self._queue.put(None)

    def wait_line(self, pattern: re.Pattern[str], within_s: float) -> re.Match[str]:
        deadline = time.monotonic() + within_s
        while time.monotonic() < deadline:
            try:
                line = self._queue.get(timeout=max(0.01, deadline - time.monotonic()))
            except queue.Empty:
                break
            if line is None:
                break
            self.lines.append(line)
            found = pattern.search(line)
            if found:
                return found
        raise AssertionError(f"no line matching {pattern.pattern!r}; output:\n{self.output}")

    def drain(self) -> None:
        while True:
            try:
                line = self._queue.get_nowait()
            except queue.Empty:
                return
            if line is not None:
                self.lines.append(line)

    @property
    def output(self) -> str:
        self.drain()
        return "\n".join(self.lines)

    def interrupt(self, within_s: float = 20.0) -> int:
        self.proc.send_signal(signal.SIGINT)
        try:
            return self.proc.wait(timeout=within_s)
        except subprocess.TimeoutExpired:  # ended here, not left to the next test
            self.kill()
            raise

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture
def tensorboard_cli() -> Iterator[Callable[..., Cli]]:
    """`tensorboard_cli(inventory, *args)`: a `Cli` started; every one still running is killed
    after the test."""
    started: list[Cli] = []

    def start(inventory: Path, *args: str) -> Cli:
        started.append(Cli(inventory, *args))
        return started[-1]

    yield start
    for cli in started:
        cli.kill()


@contextlib.contextmanager
def local_port_taken(port: int) -> Iterator[None]:
    """Hold `port` on this machine's 127.0.0.1 (if someone else already holds it, so much the
    better: it is taken either way)."""
    holder = socket.socket()
    try:
        with contextlib.suppress(OSError):
            holder.bind(("127.0.0.1", port))
            holder.listen(1)
        yield
    finally:
        holder.close()


def answer_prompt(inventory: Path, answer: str, within_s: float = 60.0) -> tuple[int, str]:
    """Run `tfctl tensorboard` on a terminal (a pty), answer its question, return (status,
    what the terminal showed)."""
    main_fd, terminal = os.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "tfctl.tui", "-i", str(inventory), "tensorboard"],
        stdin=terminal, stdout=terminal, stderr=terminal, cwd=inventory.parent,
        preexec_fn=from_a_terminal)
    os.close(terminal)
    shown, answered = b"", False
    deadline = time.monotonic() + within_s
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([main_fd], [], [], 0.2)
            if ready:
                try:
                    chunk = os.read(main_fd, 4096)
                except OSError:  # the terminal's other end closed: the command ended
                    break
                shown += chunk
            if not answered and b"[y/N]" in shown:
                os.write(main_fd, answer.encode() + b"\n")
                answered = True
            if proc.poll() is not None and not ready:
                break
        return proc.wait(timeout=10), shown.decode(errors="replace")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(main_fd)


# Test-only evaluator: the example's, after it writes down the environment it was started with.
# The example evaluator leaves once it has scored the final checkpoint, which a small training
# run writes within a second of `up` returning: its /proc environ is gone by the time a test
# could read it.
ENV_RECORDING_EVALUATOR = """\
import json, os, sys
import evaluate
with open("evaluator-environ.json", "w") as out:
    json.dump(dict(os.environ), out)
sys.exit(evaluate.main())
"""


def _examples_dir(tmp: Path) -> Path:
    d = tmp / "job"
    d.mkdir()
    for name in ("train.py", "evaluate.py", "digits.py"):
        shutil.copy(EXAMPLES / name, d / name)
    (d / "evaluate_recording_environ.py").write_text(ENV_RECORDING_EVALUATOR)
    return d


def _evaluator_environ(workdir: Path) -> dict[str, str]:
    """The environment the evaluator started in, as it recorded it in its working directory."""
    recorded = workdir / "evaluator-environ.json"
    wait_until("the evaluator recorded its environment", recorded.exists, 120, every_s=0.2)
    environ: dict[str, str] = json.loads(recorded.read_text())
    return environ


def own_workdirs(tmp: Path, hosts: list[str]) -> dict[str, dict[str, str]]:
    """`host_fields` giving every host a workdir of this test's own: runs, outputs and DONE
    markers that other tests left in the lab's shared workdirs cannot leak into this one."""
    return {h: {"workdir": str(tmp / f"workdir-{h}")} for h in hosts}


def _task_pids(run_id: str) -> dict[str, int]:
    """task name → pid of its main process (the one the supervisor started)."""
    found: dict[str, int] = {}
    for pid, env in sorted(processes_of_run(run_id).items()):
        found.setdefault(env["TFCTL_TASK"], pid)
    return found


def _runs(url: str) -> list[str]:
    status, body = get(url + "data/runs")
    assert status == 200
    runs: list[str] = json.loads(body)
    return runs


def _listening(testbed: Testbed, host: str) -> list[tuple[str, str]]:
    """(local address:port, process) of every LISTEN socket in the host's namespace."""
    out = testbed.run(host, "ss -Hltnp").stdout
    return [(line.split()[3], line.split(maxsplit=5)[-1]) for line in out.splitlines()
            if line.strip()]


@pytest.mark.tf
def test_flags_job_with_evaluator_and_tensorboard_through_the_tunnel(
    testbed: Testbed, tmp_path: Path, tensorboard_cli: Callable[..., Cli]
) -> None:
    job = {"script": "train.py", "style": "flags",
           "args": ["--steps=60", "--log_every=10", "--checkpoint_every=20"],
           "evaluator": {"host": "h1", "script": "evaluate_recording_environ.py",
                         "args": ["--train_dir=out", "--eval_interval_secs=1"]},
           "tensorboard": {"host": "h1", "logdir": "out", "port": 6006}}
    inv = testbed.write_inventory(_examples_dir(tmp_path) / "cluster.yaml", job, hosts=["h1", "h2"],
                              ps={"h2": 0}, host_fields=own_workdirs(tmp_path, ["h1", "h2"]))
    try:
        up = tfctl(inv, "up", timeout=300)
        assert up.returncode == 0, up.stdout + up.stderr
        run_id = run_id_from(up.stdout)
        pids = _task_pids(run_id)
        # CPU only: an empty mask, set
        assert environ_of(pids["tensorboard:0"]).get("CUDA_VISIBLE_DEVICES") == ""
        evaluator_env = _evaluator_environ(tmp_path / "workdir-h1")
        assert evaluator_env["TFCTL_RUN_ID"] == run_id
        assert evaluator_env.get("CUDA_VISIBLE_DEVICES") == ""
        tb_sockets = [addr for addr, proc in _listening(testbed, "h1")
                      if f"pid={pids['tensorboard:0']}," in proc or addr.endswith(":6006")]
        # only loopback (TensorBoard may briefly hold a [::1] socket while it starts)
        assert "127.0.0.1:6006" in tb_sockets, _listening(testbed, "h1")
        assert all(a.startswith(("127.", "[::1]")) for a in tb_sockets), _listening(testbed, "h1")

        with local_port_taken(6006):
            cli = tensorboard_cli(inv)
            found = cli.wait_line(URL_LINE, 60)
            url, local_port = found.group(2), int(found.group(3))
            assert found.group(1) == "h1" and local_port != 6006
            cli.wait_line(re.compile(rf"local port 6006 is taken, so the tunnel listens on "
                                     rf"{local_port}$"), 5)
        status, page = get_eventually(url, 30)
        assert status == 200 and b"<html" in page.lower()
        wait_until("TensorBoard lists both the train and the eval run",
                   lambda: {"train", "eval"} <= set(_runs(url)), 240, every_s=0.2)

        assert kill_ssh_sessions(testbed, "h1"), "the tunnel's SSH session on h1"
        assert get_eventually(url, 60)[0] == 200
        assert cli.proc.poll() is None  # the same process, never restarted
        wait_until("the reconnect said", lambda: "reconnected to h1" in cli.output, 10, every_s=0.2)
        assert "lost" in cli.output
        assert cli.interrupt() == 0, cli.output
    finally:
        tfctl(inv, "down", "--grace", "1")


@pytest.mark.tf
def test_tf_config_evaluator_is_outside_the_cluster_and_scores(testbed: Testbed, tmp_path: Path
                                                               ) -> None:
    job = {"script": "train.py", "style": "tf_config",
           "args": ["--steps=30", "--log_every=10", "--checkpoint_every=10"],
           "evaluator": {"host": "h2", "script": "evaluate_recording_environ.py",
                         "args": [f"--train_dir={tmp_path / 'workdir-h1' / 'out'}",
                                  "--eval_interval_secs=1", "--timeout_secs=200"]}}
    inv = testbed.write_inventory(_examples_dir(tmp_path) / "cluster.yaml", job, hosts=["h1", "h2"],
                              ps={"h1": 0, "h2": 0},
                              host_fields=own_workdirs(tmp_path, ["h1", "h2"]))
    try:
        up = tfctl(inv, "up", timeout=300)
        assert up.returncode == 0, up.stdout + up.stderr
        run_id = run_id_from(up.stdout)
        env = _evaluator_environ(tmp_path / "workdir-h2")
        assert env["TFCTL_RUN_ID"] == run_id and env.get("CUDA_VISIBLE_DEVICES") == ""
        tf_config = json.loads(env["TF_CONFIG"])
        assert tf_config["task"] == {"type": "evaluator", "index": 0}
        assert "evaluator" not in tf_config["cluster"] and len(tf_config["cluster"]["worker"]) == 2
        wait = tfctl(inv, "wait", "--timeout", "240", timeout=300)
        assert wait.returncode == 0, wait.stderr + tfctl(inv, "logs", "-n", "30").stdout

        def evaluator_state() -> str:
            task = next(t for t in status_json(inv)["tasks"] if t["name"] == "evaluator:0")
            return f"{task['state']} {task['exit_code']}"

        wait_until("the evaluator finished",
                   lambda: evaluator_state() != "running None", 120, every_s=0.2)
        assert evaluator_state() == "exited 0"
        logs = tfctl(inv, "logs", "evaluator:0", "-n", "50").stdout
        assert "eval finished: scored the final checkpoint (step 30)" in logs
        assert list((tmp_path / "workdir-h1" / "out" / "eval").glob("events.out.tfevents.*"))
    finally:
        tfctl(inv, "down", "--grace", "1")


def test_offers_to_start_tensorboard_and_down_stops_it(testbed: Testbed, tmp_path: Path,
                                                       tensorboard_cli: Callable[..., Cli]) -> None:
    job = {"script": "job.py", "tensorboard": {"host": "h2", "logdir": "out", "port": 6006}}
    # Own workdirs: runs other tests left on the lab's hosts must not become "the current run".
    inv = testbed.write_inventory(job_dir(tmp_path) / "cluster.yaml", job,
                              host_fields=own_workdirs(tmp_path, testbed.names))
    try:
        refused = tfctl(inv, "tensorboard")  # stdin is not a terminal: no prompt, a hint
        assert refused.returncode == 1
        assert "there is no run yet" in refused.stderr
        assert "tfctl tensorboard --yes" in refused.stderr
        status, shown = answer_prompt(inv, "n")  # on a terminal it asks, and "no" is no
        assert status == 1 and "Start it on h2? [y/N]" in shown, shown
        assert "no run yet" in tfctl(inv, "status").stdout  # nothing was started

        cli = tensorboard_cli(inv, "--yes")
        url = cli.wait_line(URL_LINE, 120).group(2)
        assert get_eventually(url, 30)[0] == 200
        assert _runs(url) == []  # no summaries in that log dir: an empty list, as JSON
        st = status_json(inv)
        run_id = st["run_id"]
        assert [(t["name"], t["state"]) for t in st["tasks"]] == [("tensorboard:0", "running")]
        assert environ_of(_task_pids(run_id)["tensorboard:0"]).get("CUDA_VISIBLE_DEVICES") == ""
        assert cli.interrupt() == 0, cli.output
        assert "tensorboard:0" in _task_pids(run_id)  # the tunnel ended, TensorBoard did not

        down = tfctl(inv, "down", "--grace", "1")
        assert down.returncode == 0 and "stopped tensorboard:0" in down.stdout
        assert processes_of_run(run_id) == {}

        cli = tensorboard_cli(inv, "--yes")  # the run's own TensorBoard task is started again
        url = cli.wait_line(URL_LINE, 120).group(2)
        assert get_eventually(url, 30)[0] == 200
        assert f"started tensorboard:0 again in run {run_id}" in cli.output
        assert status_json(inv)["run_id"] == run_id
        assert cli.interrupt() == 0, cli.output
    finally:
        tfctl(inv, "down", "--grace", "1")


@pytest.mark.tf
def test_evaluator_ignores_a_done_marker_of_another_run(tmp_path: Path) -> None:
    """A reused train dir holds the previous run's DONE until the new chief removes it; the new
    run's evaluator, started beside that chief, must not take it as its own job's end."""
    sys.path.insert(0, str(EXAMPLES))
    try:
        import evaluate
    finally:
        sys.path.remove(str(EXAMPLES))
    done = tmp_path / "DONE"
    done.write_text(json.dumps({"steps": 60, "run_id": "20260101-000000-aaaa"}))
    assert evaluate.read_done_step(str(tmp_path), "20260101-000000-bbbb") is None
    assert evaluate.read_done_step(str(tmp_path), "20260101-000000-aaaa") == 60
    assert evaluate.read_done_step(str(tmp_path), None) == 60  # outside tfctl: any DONE counts
    done.write_text(json.dumps({"steps": 30}))  # written outside tfctl: no run to compare
    assert evaluate.read_done_step(str(tmp_path), "20260101-000000-bbbb") == 30
