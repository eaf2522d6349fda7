"""One output contract: `--json` on `check`, `sync`, `setup`, `up`, `status`, `wait` and `down`
prints one JSON object on stdout (progress stays on stderr); an error under `--json` still exits
non-zero with a one-line message on stderr and nothing on stdout. Run for real on
`transport: local` hosts; the README's "Machine-readable output" documents the shapes."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support.localcluster import local_cluster, run_tfctl
from tests.support.testbedtools import processes_of_run

README = Path(__file__).parents[2] / "README.md"


def one_object(proc: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    """stdout holds exactly one JSON object and nothing else."""
    value = json.loads(proc.stdout)
    assert isinstance(value, dict), proc.stdout
    return value


def test_sync_and_setup_json(tmp_path: Path) -> None:
    inv = local_cluster(tmp_path, {"a": {}, "b": {}}, job={"setup": ["echo ready > setup.txt"]})
    sync = run_tfctl(inv, "sync", "--json")
    assert sync.returncode == 0, sync.stderr
    data = one_object(sync)
    assert data["ok"] and data["failed"] == {}
    assert set(data["hosts"]) == {"a", "b"}
    assert data["hosts"]["a"]["files_transferred"] >= 2
    assert data["hosts"]["a"]["dest"] == str(tmp_path / "work-a")
    assert "tfctl: a: " in sync.stderr  # the progress lines, as without --json
    first = one_object(run_tfctl(inv, "setup", "--json"))
    assert first["ok"] and {h: v["state"] for h, v in first["hosts"].items()} == {
        "a": "done", "b": "done"}
    assert first["sync"]["hosts"]["a"]["method"] == "unchanged"
    again = one_object(run_tfctl(inv, "setup", "--json", "--no-sync"))
    assert {v["state"] for v in again["hosts"].values()} == {"skipped"} and again["sync"] is None


def test_up_status_wait_down_json(tmp_path: Path) -> None:
    inv = local_cluster(tmp_path, {"a": {"ps": 1}})
    up = run_tfctl(inv, "up", "--json")
    assert up.returncode == 0, up.stderr
    data = one_object(up)
    run_id = data["run_id"]
    try:
        assert data["hosts"] == ["a"] and data["left_out"] == []
        assert {t["name"]: t["state"] for t in data["tasks"]} == {"ps:0": "running",
                                                                 "worker:0": "running"}
        assert f"tfctl: run {run_id} is up" in up.stderr  # the line stdout had, moved
        status = one_object(run_tfctl(inv, "status", "--json"))
        assert status["run_id"] == run_id and len(status["tasks"]) == 2

        again = run_tfctl(inv, "up", "--json")  # refused: the run is live on `a`
        assert again.returncode == 1 and again.stdout == ""
        last = again.stderr.strip().splitlines()[-1]
        assert re.fullmatch(rf"error: a: run {run_id} is still live there.*", last), \
            again.stderr
        assert "Traceback" not in again.stderr

        waited = run_tfctl(inv, "wait", "--json", "--timeout", "0.5")
        assert waited.returncode == 1
        assert one_object(waited) == {"run_id": run_id, "ended": False, "exit_code": None,
                                      "fatal": None, "stopped": [], "timed_out": True,
                                      "failed_first": None}
    finally:
        down = run_tfctl(inv, "down", "--json", "--grace", "1")
    assert down.returncode == 0, down.stderr
    summary = one_object(down)
    assert summary["run_id"] == run_id and summary["clean"] and summary["errors"] == {}
    assert sorted(summary["stopped"]) == ["ps:0", "worker:0"]
    assert processes_of_run(run_id) == {}


def test_up_wait_json_is_one_object_with_the_end(tmp_path: Path) -> None:
    inv = local_cluster(tmp_path, {"a": {"ps": 1}}, job={"args": ["--steps=2", "--step_s=0.1"]})
    proc = run_tfctl(inv, "up", "--wait", "--json")
    assert proc.returncode == 0, proc.stderr
    data = one_object(proc)
    assert data["wait"]["ended"] and data["wait"]["exit_code"] == 0
    assert data["wait"]["timed_out"] is False and data["tasks"][0]["name"] == "ps:0"
    assert processes_of_run(data["run_id"]) == {}


def test_no_run_and_errors_under_json(tmp_path: Path) -> None:
    inv = local_cluster(tmp_path, {"a": {}}, job={"sync": {"source": "missing"}})
    status = run_tfctl(inv, "status", "--json")
    assert status.returncode == 0 and one_object(status)["run_id"] is None
    down = run_tfctl(inv, "down", "--json")
    assert down.returncode == 0 and one_object(down)["run_id"] is None
    waited = run_tfctl(inv, "wait", "--json")
    assert waited.returncode == 1 and one_object(waited)["run_id"] is None
    sync = run_tfctl(inv, "sync", "--json")  # the source folder is missing
    assert sync.returncode == 1 and sync.stdout == ""
    assert sync.stderr.startswith("error: local: sync source ") and sync.stderr.count("\n") == 1
    broken = run_tfctl(inv.parent / "nope.yaml", "check", "--json")
    assert broken.returncode == 2 and broken.stdout == ""
    assert broken.stderr.count("\n") == 1 and "nope.yaml" in broken.stderr


def test_check_json(tmp_path: Path) -> None:
    inv = local_cluster(tmp_path, {"a": {}})
    proc = run_tfctl(inv, "check", "--json", timeout=180)
    data = one_object(proc)
    assert [h["host"] for h in data["hosts"]] == ["a"]
    assert proc.returncode == (0 if data["ok"] else 1), proc.stderr
    levels = {f["level"] for f in data["hosts"][0]["findings"]}
    assert levels <= {"ok", "info", "warn", "fail"} and "ok" in levels
    firewall = one_object(run_tfctl(inv, "check", "--firewall", "--json"))
    assert "nft" in firewall["firewall"] or "iptables" in firewall["firewall"]


def test_readme_documents_every_json_command_and_its_jq_example_runs(tmp_path: Path) -> None:
    text = README.read_text()
    section = text.split("## Machine-readable output", 1)[1].split("\n## ", 1)[0]
    for command in ("check", "sync", "setup", "up", "status", "wait", "down", "plan", "gpus",
                    "runs", "logs", "exec"):
        assert f"`tfctl {command}" in section, command
    if shutil.which("jq") is None:
        pytest.skip("needs jq")
    inv = local_cluster(tmp_path, {"a": {"ps": 1}})
    example = re.search(r"```sh\n(run=.*?)```", section, re.S)
    assert example, "no runnable jq example"
    proc = subprocess.run(["bash", "-c", "set -euo pipefail\n" + example.group(1)],
                          capture_output=True, text=True, timeout=120, cwd=inv.parent,
                          env={**os.environ, "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin",
                               "TFCTL_INVENTORY": str(inv)})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "ps:0 running" in proc.stdout
