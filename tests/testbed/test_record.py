"""A run records itself on its hosts (remote/agent/record.py), with no client connected.

On the lab with the test-only nvidia-smi stand-in (two GPUs on h1 and h2): after `up` and no
other tfctl command, each GPU host's run folder holds the GPU list, one compact sample line per
GPU per second, who held each GPU (our tasks by name), and the tasks' events up to the job's end.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from tests.support.testbedtools import job_dir, processes_of_run, run_id_from, tfctl

JOB = {"script": "job.py", "style": "flags", "args": ["--steps=20"]}  # ~4 s


def _keeper_alive(run_dir: Path) -> bool:
    """The run's keeper (`keeper.pid.json`) still runs on this host."""
    try:
        pid = json.loads((run_dir / "keeper.pid.json").read_text())["pid"]
    except (OSError, ValueError, KeyError):
        return False
    try:
        return "zombie" not in Path(f"/proc/{pid}/status").read_text(errors="replace")
    except OSError:
        return False


def test_gpu_samples_owners_and_events_are_recorded(gpu_testbed, tmp_path: Path,
                                                    down_after) -> None:  # type: ignore[no-untyped-def]
    testbed = gpu_testbed
    inv = testbed.write_inventory(job_dir(tmp_path) / "cluster.yaml", JOB, hosts=["h1", "h2"],
                              gpus={"h1": [0, 1], "h2": [0]}, ps={"h1": 1, "h2": 0})
    down_after.append(inv)
    up = tfctl(inv, "up")
    assert up.returncode == 0, up.stdout + up.stderr
    run_id = run_id_from(up.stdout)
    deadline = time.monotonic() + 90
    run_dir = testbed.host("h1").workdir / ".tfctl" / "runs" / run_id
    while processes_of_run(run_id) or not (run_dir / "finished.json").exists() or \
            _keeper_alive(run_dir):  # its last look writes the last events
        assert time.monotonic() < deadline, processes_of_run(run_id)
        time.sleep(0.5)
    gpus = json.loads((run_dir / "gpus.json").read_text())
    assert [g["index"] for g in gpus["gpus"]] == ["0", "1"]
    samples = [line.split(",") for line in (run_dir / "gpu.csv").read_text().splitlines()]
    assert {row[1] for row in samples} == {"0", "1"} and all(len(row) == 7 for row in samples)
    assert len(samples) >= 4  # a few seconds of two GPUs
    owners = (run_dir / "owners.csv").read_text().splitlines()
    assert any(line.split(",")[1:3][0] == "0" and line.endswith(",worker:0") for line in owners)
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    kinds = {(e.get("task"), e["event"]) for e in events}
    assert {("worker:0", "start"), ("worker:0", "exit"), ("ps:0", "stopped")} <= kinds
    assert events[-1]["event"] in ("exit", "stopped", "end")
    assert any(e["event"] == "end" and e["cause"] == "worker:0 ended" for e in events)
    speed = [line.split(",") for line in (run_dir / "throughput.csv").read_text().splitlines()]
    assert {row[1] for row in speed} == {"worker:0", "worker:1"}  # h1's two workers
    assert all(row[2:] == ["5", "steps/s"] for row in speed)  # the light job's 0.2 s steps
