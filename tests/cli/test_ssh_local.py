"""`tfctl ssh` without sshd: a `transport: local` host (the demo's) runs the same session line
as a local shell; and the line itself, run by a real `sh`, with awkward paths and values."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tfctl.remote.connect.interactive import session_line


def sh(line: str, home: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["/bin/sh", "-c", line], capture_output=True, text=True, timeout=30,
                          env={"HOME": str(home), "PATH": os.environ["PATH"]}, cwd="/")


def test_the_line_enters_the_workdir_and_exports_values_verbatim(tmp_path: Path) -> None:
    work = tmp_path / "my work"
    work.mkdir()
    env = {"TF_CONFIG": json.dumps({"task": {"type": "worker", "index": 1}}),
           "ODD": "it's $HOME `x` \"y\"", "TFCTL_RUN_ID": "must-not-pass", "1BAD": "skipped"}
    line = session_line("~/my work", env, ["python3", "-c",
                                           "import json, os; print(json.dumps([os.getcwd(), "
                                           "dict(os.environ)]))"])
    proc = sh(line, tmp_path)
    assert proc.returncode == 0, proc.stderr
    cwd, seen = json.loads(proc.stdout)
    assert cwd == str(work)
    assert seen["TF_CONFIG"] == env["TF_CONFIG"] and seen["ODD"] == env["ODD"]
    assert "TFCTL_RUN_ID" not in seen and "1BAD" not in seen


def test_a_missing_workdir_fails_a_command_and_says_so(tmp_path: Path) -> None:
    proc = sh(session_line("/nonexistent/w", {}, ["true"]), tmp_path)
    assert proc.returncode == 1 and "no folder /nonexistent/w" in proc.stderr
    proc = sh(session_line("/nonexistent/w", {}, []).replace(
        'exec "${SHELL:-/bin/sh}" -l', "pwd"), tmp_path)  # the shell's place, not the shell
    assert proc.stdout.strip() == "/" and "tfctl sync" in proc.stderr


def test_a_local_host_gets_its_session_without_sshd(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    inv = tmp_path / "cluster.yaml"
    inv.write_text(f"name: t\nhosts:\n  - {{name: here, transport: local, workdir: {work}, "
                   f"gpus: 0, python: {sys.executable}}}\n"
                   "job: {script: train.py, style: tf_config}\n")
    proc = subprocess.run([sys.executable, "-m", "tfctl.tui", "-i", str(inv), "ssh", "worker:0",
                           "--", "sh", "-c", 'pwd; echo "$TF_CONFIG"; exit 4'],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 4, proc.stderr
    where, config = proc.stdout.splitlines()
    assert where == str(work) and json.loads(config)["task"] == {"type": "worker", "index": 0}
