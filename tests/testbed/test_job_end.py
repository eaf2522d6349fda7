"""The end of a job is applied on the hosts themselves: no tfctl command after `up`.

Each host's watcher (remote/agent/watch.py) sees worker 0 (the chief of the flags style) end —
on its own host from the exit record, on the others from its port closing for good — stops its
parameter servers, records why, and exits; nothing of the run is left on any host. A host cut
off from the client (and from the chief) still ends its part, once the silence has lasted the
job's silence window.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest

from tests.support.agentdriver import SLEEPER, AgentDir, ok, sh
from tests.support.testbedtools import job_dir, processes_of_run, run_id_from, tfctl
from tfctl.remote.agent.watch import WATCH_TICK_S

pytestmark = pytest.mark.testbed

JOB = {"script": "job.py", "style": "flags", "args": ["--steps=3"]}
QUICK_END = {"TFCTL_CLOSED_FOR_GOOD_S": "3"}
"""`up`'s environment: the other hosts take worker 0's port closed for 3 s as its end (20 s by
default, remote/runs/endrule.py), which is what these tests wait for."""


def _keepers(testbed, run_id: str) -> list[int]:  # type: ignore[no-untyped-def]
    """The run's keepers still alive (all lab hosts share this machine's /proc). A keeper
    that has exited but is not yet reaped by init (a zombie) is gone."""
    alive = []
    for host in testbed.names:
        record = testbed.host(host).workdir / ".tfctl" / "runs" / run_id / "keeper.pid.json"
        pid = json.loads(record.read_text())["pid"]
        try:
            comm = Path(f"/proc/{pid}/comm").read_text().strip()
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if comm == "tfctl-keeper" and state not in ("Z", "X"):
            alive.append(pid)
    return alive


def _until_gone(run_id: str, testbed, timeout_s: float) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while processes_of_run(run_id) or _keepers(testbed, run_id):
        if time.monotonic() > deadline:
            raise AssertionError(f"left: {processes_of_run(run_id)} {_keepers(testbed, run_id)}")
        time.sleep(0.5)


def _finished(testbed, host: str, run_id: str) -> dict:  # type: ignore[no-untyped-def, type-arg]
    path = testbed.host(host).workdir / ".tfctl" / "runs" / run_id / "finished.json"
    return dict(json.loads(path.read_text()))


def test_hosts_end_the_job_by_themselves(testbed, tmp_path: Path, down_after) -> None:  # type: ignore[no-untyped-def]
    inv = testbed.write_inventory(job_dir(tmp_path) / "cluster.yaml", JOB)
    down_after.append(inv)
    up = tfctl(inv, "up", env=QUICK_END)
    assert up.returncode == 0, up.stdout + up.stderr
    run_id = run_id_from(up.stdout)
    _until_gone(run_id, testbed, 90)  # no tfctl command in between
    for host in testbed.names:
        finished = _finished(testbed, host, run_id)
        assert finished["status"]["cause"] == "worker:0 ended", finished
        assert finished["status"]["by"] == f"watcher on {host}"
    # The next morning: the run is listed with how it ended, read from the hosts.
    listed = json.loads(tfctl(inv, "runs", "--json").stdout)["runs"]
    run = next(r for r in listed if r["run_id"] == run_id)
    assert run["ended"] == "exit 0: worker:0 ended" and not run["live"]
    assert run["hosts"] == ["h1", "h2", "h3"] and "worker:0" in run["tasks"]
    assert run["duration_s"] is not None and run["duration_s"] >= 0
    # ...and can be looked at again by its id, whatever run is current.
    st = json.loads(tfctl(inv, "status", "--run", run_id, "--json").stdout)
    assert st["run_id"] == run_id and {t["state"] for t in st["tasks"]} <= {"exited", "stopped"}
    assert "worker:0 | worker:0 done" in tfctl(inv, "logs", "--run", run_id).stdout
    unknown = tfctl(inv, "status", "--run", "no-such-run")
    assert unknown.returncode == 1 and "no host remembers run no-such-run" in unknown.stderr


def test_a_cut_host_ends_its_part_and_the_others_theirs(healed, tmp_path: Path,  # type: ignore[no-untyped-def]
                                                        down_after) -> None:
    if not healed.isolated:
        pytest.skip("needs the network-namespace lab (root and `ip netns`)")
    testbed = healed
    # h3 never hears of worker 0's end: silence, not a refusal, which ends its part only once
    # it has lasted the job's silence window (short here; minutes by default).
    inv = testbed.write_inventory(job_dir(tmp_path) / "cluster.yaml",
                              dict(JOB, args=["--steps=25"], silence_window=8))  # 5 s: to cut h3
    down_after.append(inv)
    up = tfctl(inv, "up", env=QUICK_END)
    assert up.returncode == 0, up.stdout + up.stderr
    run_id = run_id_from(up.stdout)
    testbed.cut("h3")
    cut_at = time.time()
    _until_gone(run_id, testbed, 120)
    assert _finished(testbed, "h1", run_id)["status"]["by"] == "watcher on h1"
    finished = _finished(testbed, "h3", run_id)
    assert finished["status"]["cause"] == "worker:0 silent for 8 s (no answer from its port)"
    assert finished["finished_at"] - cut_at >= 8


def test_down_leaves_no_watcher_behind(testbed, tmp_path: Path, down_after) -> None:  # type: ignore[no-untyped-def]
    inv = testbed.write_inventory(job_dir(tmp_path) / "cluster.yaml",
                              dict(JOB, args=["--forever"]))
    down_after.append(inv)
    up = tfctl(inv, "up")
    assert up.returncode == 0, up.stdout + up.stderr
    run_id = run_id_from(up.stdout)
    assert len(_keepers(testbed, run_id)) == len(testbed.names)
    down = tfctl(inv, "down", "--grace", "1")
    assert down.returncode == 0, down.stdout + down.stderr
    # When `down` returns, nothing of the run is left: no task and no watcher on any host...
    assert not processes_of_run(run_id) and _keepers(testbed, run_id) == []
    # ...and each watcher still wrote its last records (the tasks' ends) before it went.
    for host in testbed.names:
        events = testbed.host(host).workdir / ".tfctl" / "runs" / run_id / "events.jsonl"
        assert '"event": "stopped"' in events.read_text(), host


def test_a_chief_stopped_by_a_client_is_not_the_jobs_end(agent_dir: AgentDir) -> None:
    """`tfctl down` stops the tasks before their watcher, and a restart stops one task and starts
    it again: a watcher that looks in between sees the chief's exit record, which is no end of
    the job (judged one, it stopped the parameter servers and a notice said the job failed).
    The chief started again and ending by itself is the job's end, as ever."""
    end = {"mode": "any", "serving": ["ps"], "tensorboard": {"keep": False, "grace_s": 0.0},
           "deciders": [{"name": "worker:0", "host": "here"}]}
    run_id = agent_dir.start([sh("worker:0", SLEEPER), sh("ps:0", SLEEPER)], host="here", end=end)
    run_dir = Path(agent_dir.workdir, ".tfctl", "runs", run_id)
    agent_dir.wait_state(run_id, "worker:0", ("running",))
    ok("stop", workdir=agent_dir.workdir, run_id=run_id, tasks=["worker:0"], grace_s=1.0)
    assert agent_dir.status(run_id)["worker:0"]["state"] == "stopped"
    time.sleep(3 * WATCH_TICK_S)  # the watcher has looked at the stopped chief, more than once
    assert agent_dir.status(run_id)["ps:0"]["state"] == "running"
    assert not (run_dir / "finished.json").exists()

    ok("launch", workdir=agent_dir.workdir, run_id=run_id, tasks=["worker:0"])
    chief = agent_dir.wait_state(run_id, "worker:0", ("running",))
    os.kill(int(chief["pid"]), signal.SIGTERM)  # the chief ends by itself (no client stopped it)
    agent_dir.wait_state(run_id, "ps:0", ("stopped",))
    finished = json.loads((run_dir / "finished.json").read_text())
    assert finished["status"]["cause"] == "worker:0 ended"
