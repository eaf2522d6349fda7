"""The bundled example trainer and evaluator, run for real as local processes on loopback.

One test per training style (single process, MultiWorkerMirrored, ParameterServer, classic
flags), each a real cluster of TensorFlow processes on free 127.0.0.1 ports in a temp dir; the
evaluator is run once after a finished run and once live beside a running cluster. Servers that
never exit (ps, and workers under ParameterServerStrategy) are ended by process group at the end.
"""

from __future__ import annotations

import importlib.resources
import importlib.util
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.leftovers import stop_groups
from tests.support.trainer import assert_whole_checkpoint_here

pytestmark = [
    pytest.mark.tf,
    pytest.mark.skipif(importlib.util.find_spec("tensorflow") is None
                       or importlib.util.find_spec("sklearn") is None,
                       reason="needs tensorflow and scikit-learn"),
]

EXAMPLES = importlib.resources.files("tfctl.examples")
TRAIN = str(EXAMPLES / "train.py")
EVALUATE = str(EXAMPLES / "evaluate.py")
STEPS = 30
EXIT_TIMEOUT_SECS = 150
SMALL_RUN = [f"--steps={STEPS}", "--log_every=10", "--checkpoint_every=10", "--batch_size=16"]


def free_ports(count: int) -> list[int]:
    """Distinct ports free on every interface (TF servers listen on all of them)."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for sock in sockets:
            sock.bind(("0.0.0.0", 0))
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


class Processes:
    """Processes started by one test, each in its own process group, output in a log file."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.started: dict[str, subprocess.Popen[bytes]] = {}

    def start(self, name: str, argv: list[str], env_extra: dict[str, str] | None = None) -> None:
        env = {key: value for key, value in os.environ.items() if key != "TF_CONFIG"}
        env.update(CUDA_VISIBLE_DEVICES="", PYTHONUNBUFFERED="1", TF_CPP_MIN_LOG_LEVEL="2",
                   **(env_extra or {}))
        with open(self.workdir / f"{name}.log", "wb") as log:
            self.started[name] = subprocess.Popen(
                [sys.executable, *argv], cwd=self.workdir, env=env, stdout=log,
                stderr=subprocess.STDOUT, start_new_session=True)

    def log(self, name: str) -> str:
        return (self.workdir / f"{name}.log").read_text(errors="replace")

    def wait_ok(self, *names: str) -> None:
        """Each named process exits 0 in time; otherwise fail with its log's tail."""
        deadline = time.monotonic() + EXIT_TIMEOUT_SECS
        for name in names:
            try:
                code = self.started[name].wait(timeout=max(deadline - time.monotonic(), 1))
            except subprocess.TimeoutExpired:
                code = None
            assert code == 0, f"{name} ended with {code}:\n{self.log(name)[-3000:]}"

    def stop_all(self) -> None:
        """SIGTERM ends ps/worker servers; MultiWorkerMirrored ignores it, so SIGKILL after."""
        stop_groups(self.started.values(), 5)

    def __enter__(self) -> Processes:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop_all()


@pytest.fixture
def processes(tmp_path: Path) -> Iterator[Processes]:
    with Processes(tmp_path) as started:
        yield started


def result_of(log: str) -> dict[str, object]:
    lines = [line for line in log.splitlines() if line.startswith("RESULT ")]
    assert len(lines) == 1, f"expected one RESULT line:\n{log[-3000:]}"
    return dict(json.loads(lines[0].removeprefix("RESULT ")))


def assert_trained(train_dir: Path, result: dict[str, object], style: str) -> None:
    """RESULT, DONE, the final checkpoint and the train event file agree."""
    assert result["style"] == style
    assert result["train_dir"] == str(train_dir)
    assert isinstance(result["steps"], int) and result["steps"] >= STEPS
    assert isinstance(result["loss"], float) and result["loss"] > 0
    assert isinstance(result["accuracy"], float) and 0 <= result["accuracy"] <= 1
    done = json.loads((train_dir / "DONE").read_text())
    assert done["steps"] == result["steps"]
    assert done["checkpoint"] == str(train_dir / "ckpt" / f"ckpt-{result['steps']}")
    assert Path(done["checkpoint"] + ".index").is_file()
    assert "model_checkpoint_path" in (train_dir / "ckpt" / "checkpoint").read_text()
    assert list((train_dir / "train").glob("events.out.tfevents.*"))


def log_lines(log: str, prefix: str) -> list[str]:
    return [line for line in log.splitlines() if line.startswith(prefix)]


def test_single_process_then_evaluator(processes: Processes, tmp_path: Path) -> None:
    processes.start("train", [TRAIN, "--train_dir=out", *SMALL_RUN])  # relative to cwd
    processes.wait_ok("train")
    train_dir = tmp_path / "out"
    log = processes.log("train")
    result = result_of(log)
    assert_trained(train_dir, result, "single")
    assert result["steps"] == STEPS
    assert [line.split()[1] for line in log_lines(log, "step ")] == ["10", "20", "30"]
    assert all("steps_per_sec=" in line for line in log_lines(log, "step "))

    processes.start("eval", [EVALUATE, f"--train_dir={train_dir}", "--eval_interval_secs=0.5",
                             "--timeout_secs=60"])
    processes.wait_ok("eval")
    evals = log_lines(processes.log("eval"), "eval step ")
    assert evals and evals[-1].startswith(f"eval step {STEPS} loss=")
    assert list((train_dir / "eval").glob("events.out.tfevents.*"))


def test_multi_worker_mirrored(processes: Processes, tmp_path: Path) -> None:
    cluster = {"worker": [f"127.0.0.1:{port}" for port in free_ports(2)]}
    train_dir = tmp_path / "out"
    for index in range(2):
        tf_config = {"cluster": cluster, "task": {"type": "worker", "index": index}}
        processes.start(f"worker{index}", [TRAIN, f"--train_dir={train_dir}", *SMALL_RUN],
                        {"TF_CONFIG": json.dumps(tf_config)})
    processes.wait_ok("worker0", "worker1")
    result = result_of(processes.log("worker0"))
    assert_trained(train_dir, result, "multi_worker")
    assert result["steps"] == STEPS
    assert not log_lines(processes.log("worker1"), "RESULT")
    # Synchronous training: both workers log the same reduced numbers.
    strip_rate = [line.rsplit(" ", 1)[0] for line in log_lines(processes.log("worker0"), "step ")]
    assert strip_rate == [line.rsplit(" ", 1)[0]
                          for line in log_lines(processes.log("worker1"), "step ")]
    # worker 1 keeps its own checkpoints beside the owner's: what it restores after a restart.
    assert sorted(path.name for path in train_dir.iterdir()) == [
        "DONE", "ckpt", "ckpt-worker1", "train"]


def test_single_process_mirrored_over_two_logical_cpus(processes: Processes,
                                                       tmp_path: Path) -> None:
    processes.start("train", [TRAIN, "--train_dir=out", "--strategy=mirrored",
                              "--cpu_devices=2", *SMALL_RUN])
    processes.wait_ok("train")
    log = processes.log("train")
    assert "mirrored over 2 devices training" in log
    assert_trained(tmp_path / "out", result_of(log), "mirrored")


def test_a_restarted_run_resumes_from_its_checkpoint(processes: Processes,
                                                     tmp_path: Path) -> None:
    processes.start("first", [TRAIN, "--train_dir=out", *SMALL_RUN])
    processes.wait_ok("first")
    longer = [arg if not arg.startswith("--steps=") else f"--steps={STEPS + 20}"
              for arg in SMALL_RUN]
    processes.start("again", [TRAIN, "--train_dir=out", *longer])
    processes.wait_ok("again")
    log = processes.log("again")
    assert f"at global step {STEPS}" in log_lines(log, "resumed from ")[0]
    # Only the steps after the checkpoint ran: the global step never went back.
    assert [line.split()[1] for line in log_lines(log, "step ")] == [str(STEPS + 10),
                                                                    str(STEPS + 20)]
    assert result_of(log)["steps"] == STEPS + 20


def test_parameter_server_strategy(processes: Processes, tmp_path: Path) -> None:
    ports = iter(free_ports(5))
    cluster = {"chief": [f"127.0.0.1:{next(ports)}"],
               "worker": [f"127.0.0.1:{next(ports)}" for _ in range(2)],
               "ps": [f"127.0.0.1:{next(ports)}" for _ in range(2)]}
    train_dir = tmp_path / "out"
    for task_type in ("ps", "worker", "chief"):
        for index in range(len(cluster[task_type])):
            tf_config = {"cluster": cluster, "task": {"type": task_type, "index": index}}
            processes.start(f"{task_type}{index}", [TRAIN, f"--train_dir={train_dir}",
                                                    *SMALL_RUN],
                            {"TF_CONFIG": json.dumps(tf_config), "GRPC_FAIL_FAST": "use_caller"})
    processes.wait_ok("chief0")
    result = result_of(processes.log("chief0"))
    assert_trained(train_dir, result, "ps_strategy")
    assert result["steps"] == STEPS
    # The variables live on two ps tasks, but the chief reads and writes the checkpoint itself
    # (experimental_io_device): every shard lands on its own disk, no shared filesystem needed.
    assert_whole_checkpoint_here(train_dir / "ckpt", STEPS)
    for server in ("ps0", "ps1", "worker0", "worker1"):
        assert processes.started[server].poll() is None, f"{server} should still serve"


def test_flags_between_graph_with_live_evaluator(processes: Processes, tmp_path: Path) -> None:
    ps_port, *worker_ports = free_ports(3)
    train_dir = tmp_path / "out"
    flags = [f"--ps_hosts=127.0.0.1:{ps_port}",
             "--worker_hosts=" + ",".join(f"127.0.0.1:{port}" for port in worker_ports)]
    processes.start("eval", [EVALUATE, f"--train_dir={train_dir}", "--eval_interval_secs=0.5",
                             "--timeout_secs=120"])
    for job, count in (("ps", 1), ("worker", 2)):
        for index in range(count):
            processes.start(f"{job}{index}", [TRAIN, f"--train_dir={train_dir}", *SMALL_RUN,
                                              *flags, f"--job_name={job}",
                                              f"--task_index={index}"])
    processes.wait_ok("worker0", "worker1", "eval")
    result = result_of(processes.log("worker0"))
    assert_trained(train_dir, result, "flags")
    assert not log_lines(processes.log("worker1"), "RESULT")
    evals = log_lines(processes.log("eval"), "eval step ")
    assert evals and evals[-1].startswith(f"eval step {result['steps']} loss=")
    assert list((train_dir / "eval").glob("events.out.tfevents.*"))
    assert processes.started["ps0"].poll() is None, "a ps serves until it is stopped"
