"""`tfctl demo`'s pieces: a demo folder with the example and an inventory for this machine.

Kept apart from the click command so tests can build the same folder. The inventory is an
ordinary one (`transport: local`), so the demo runs the exact code path of a real lab: plan,
launch, manifests, status, logs and down.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

EXAMPLE_FILES = ("train.py", "evaluate.py", "digits.py")


@dataclass(frozen=True)
class DemoSetup:
    dir: Path
    inventory: Path
    gpus: tuple[int, ...]
    train_dir: Path
    tensorboard_port: int | None


def local_gpus() -> tuple[int, ...]:
    """GPU indices nvidia-smi lists on this machine; () when there is none or no driver."""
    if shutil.which("nvidia-smi") is None:
        return ()
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=index", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return ()
    if out.returncode != 0:
        return ()
    return tuple(int(x) for x in out.stdout.split() if x.strip().isdigit())


def free_port_block(count: int, start: int = 22220, stop: int = 40000) -> int:
    """The first port P such that P..P+count-1 can all be bound on this machine."""
    for base in range(start, stop, count):
        if all(_bindable(p) for p in range(base, base + count)):
            return base
    raise RuntimeError("no free block of local ports found")


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("0.0.0.0", port))
        except OSError:
            return False
    return True


def tensorboard_available(python: str) -> bool:
    probe = "import importlib.util,sys; sys.exit(importlib.util.find_spec('tensorboard') is None)"
    return subprocess.run([python, "-c", probe], capture_output=True).returncode == 0


def prepare_demo(directory: Path, steps: int, python: str = sys.executable) -> DemoSetup:
    """Create the demo folder: the example trainer and a `cluster.yaml` for this machine."""
    directory.mkdir(parents=True, exist_ok=True)
    examples = resources.files("tfctl.examples")
    for name in EXAMPLE_FILES:
        (directory / name).write_text(examples.joinpath(name).read_text())
    gpus = local_gpus()
    base = free_port_block(4)
    train_dir = directory / "out"
    tb_port = free_port_block(1, start=6006) if tensorboard_available(python) else None
    inventory = directory / "cluster.yaml"
    data = demo_inventory(directory, gpus, base, train_dir, steps, python, tb_port)
    inventory.write_text("# Written by `tfctl demo`: a real local cluster on this machine.\n"
                         + yaml.safe_dump(data, sort_keys=False))
    return DemoSetup(directory, inventory, gpus, train_dir, tb_port)


def demo_inventory(directory: Path, gpus: tuple[int, ...], base_port: int, train_dir: Path,
                   steps: int, python: str, tb_port: int | None) -> dict[str, Any]:
    host: dict[str, Any] = {"name": "local", "address": "localhost", "transport": "local",
                            "ps": 1}
    if gpus:
        host["gpus"] = list(gpus)
    else:
        host["gpus"] = 0
        host["cpu_workers"] = 2
    job: dict[str, Any] = {
        "script": "train.py",
        "args": [f"--train_dir={train_dir}", f"--steps={steps}", "--log_every=10"],
        "style": "flags",
        "workers": "per_gpu",
        "ports": {"ps": base_port, "worker": base_port + 1},
        "sync": False,
    }
    if tb_port is not None:
        job["tensorboard"] = {"host": "local", "logdir": str(train_dir), "port": tb_port}
    return {
        "name": "demo",
        "defaults": {"workdir": str(directory), "python": python,
                     "env": {"TF_CPP_MIN_LOG_LEVEL": "2"}},
        "hosts": [host],
        "job": job,
    }


def parse_result(lines: list[str]) -> dict[str, Any] | None:
    """The trainer's final `RESULT {...}` line, if it printed one."""
    for line in reversed(lines):
        if line.startswith("RESULT "):
            try:
                value = json.loads(line[len("RESULT "):])
            except ValueError:
                return None
            return value if isinstance(value, dict) else None
    return None


def summary_files(train_dir: Path) -> tuple[list[str], list[str]]:
    """Checkpoint index files and TensorBoard event files the job left in its train dir."""
    ckpts = sorted(str(p) for p in train_dir.glob("ckpt/*.index"))
    events = sorted(str(p) for p in train_dir.rglob("events.out.tfevents.*"))
    return ckpts, events


def default_demo_dir() -> Path:
    return Path(os.getcwd()) / "tfctl-demo"
