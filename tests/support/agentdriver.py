"""The host agent run for real, as tfctl runs it: `python -` with the program on stdin (one
operation a process), real task processes; the tests of the agent drive a workdir with `AgentDir`.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tfctl.remote.connect.session.program import agent_program

PY = sys.executable


def call(op: str, *, python_flags: tuple[str, ...] = (), **args: Any) -> dict[str, Any]:
    """One round trip, as tfctl does it; a leaked descriptor would make this hang (timeout)."""
    proc = subprocess.run([PY, *python_flags, "-"], input=agent_program(op, args),
                          capture_output=True, text=True, timeout=30)
    lines = proc.stdout.strip().splitlines()
    assert lines, f"no answer from agent {op}: rc={proc.returncode} stderr={proc.stderr}"
    answer: dict[str, Any] = json.loads(lines[-1])
    return answer


def ok(op: str, **args: Any) -> Any:
    answer = call(op, **args)
    assert answer["ok"], answer
    return answer["result"]


def tagged(run_id: str) -> dict[int, str]:
    """pid → TFCTL_TASK of every live (non-zombie) process carrying TFCTL_RUN_ID=run_id."""
    found = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            env = Path(f"/proc/{name}/environ").read_bytes().split(b"\0")
            state = Path(f"/proc/{name}/stat").read_bytes().rsplit(b")", 1)[1].split()[0]
        except OSError:
            continue
        if f"TFCTL_RUN_ID={run_id}".encode() in env and state not in (b"Z", b"X"):
            task = [e for e in env if e.startswith(b"TFCTL_TASK=")]
            found[int(name)] = task[0].split(b"=", 1)[1].decode() if task else ""
    return found


def wait_for(check: Callable[[], Any], timeout_s: float = 10.0) -> Any:
    deadline = time.time() + timeout_s
    while True:
        value = check()
        if value or time.time() > deadline:
            return value
        time.sleep(0.05)


def sh(name: str, script: str, **extra: Any) -> dict[str, Any]:
    return task(name, ["sh", "-c", script], **extra)


def pyt(name: str, code: str, **extra: Any) -> dict[str, Any]:
    return task(name, [PY, "-c", code], **extra)


def task(name: str, argv: list[str], port: int | None = None, restart: dict[str, Any] | None = None,
         env: dict[str, str] | None = None, cwd: str | None = None) -> dict[str, Any]:
    kind, index = name.split(":")
    return {"name": name, "type": kind, "index": int(index), "argv": argv,
            "env": dict(env or {}, PYTHONUNBUFFERED="1"), "cwd": cwd, "port": port,
            "cuda_visible_devices": "", "restart": restart or {"policy": "never"}}


class AgentDir:
    """A workdir the agent's runs go in, driven operation by operation; `cleanup` (or leaving
    it as a context) stops every run it started (tests get one as the `agent_dir` fixture,
    tests/support/fixtures.py)."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = str(workdir)
        self.run_ids: list[str] = []

    def prepare(self, tasks: list[dict[str, Any]], **manifest: Any) -> str:
        run_id = f"test-{uuid.uuid4().hex[:12]}"
        ok("prepare", workdir=self.workdir, run_id=run_id,
           manifest=dict(manifest, inventory="agent-test", tasks=tasks))
        self.run_ids.append(run_id)
        return run_id

    def start(self, tasks: list[dict[str, Any]], **manifest: Any) -> str:
        run_id = self.prepare(tasks, **manifest)
        ok("launch", workdir=self.workdir, run_id=run_id)
        return run_id

    def status(self, run_id: str, tail: int = 1) -> dict[str, dict[str, Any]]:
        result = ok("status", workdir=self.workdir, run_id=run_id, tail=tail)
        return {t["name"]: t for t in result["tasks"]}

    def wait_state(self, run_id: str, name: str, states: tuple[str, ...]) -> dict[str, Any]:
        wait_for(lambda: self.status(run_id)[name]["state"] in states)
        return self.status(run_id, tail=20)[name]

    def log(self, run_id: str, name: str) -> str:
        path = Path(self.workdir, ".tfctl", "runs", run_id, name.replace(":", "-") + ".log")
        return path.read_text() if path.exists() else ""

    def cleanup(self) -> None:
        for run_id in self.run_ids:
            call("stop", workdir=self.workdir, run_id=run_id, grace_s=0.2)
            for pid in tagged(run_id):  # only if stop failed: the pids we started, by id
                os.kill(pid, signal.SIGKILL)

    def __enter__(self) -> AgentDir:
        return self

    def __exit__(self, *exc: object) -> None:
        self.cleanup()


SLEEPER = "echo hi; exec sleep 60"
"""A task that says hi and sleeps a minute: something to stop."""
