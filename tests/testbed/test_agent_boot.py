"""A host's restart, as the agent sees it: records of an earlier boot, lost tasks started again.

Run for real as in tests/testbed/test_agent.py (tests/support/agentdriver.py: `python -` with
the program, real task processes). A host restart here is what it leaves on disk: the run's
records written under another boot id and none of their processes (the testbed test,
tests/testbed/test_reboot.py, restarts a host's boot for real). The boot readers are checked
against this machine's /proc.
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any

import pytest

from tests.support.agentdriver import SLEEPER, AgentDir, call, ok, sh, tagged, wait_for
from tfctl.remote.agent import boot

pytestmark = pytest.mark.timeout(60)

EARLIER_BOOT = "00000000-0000-4000-8000-000000000000"


def _run_dir(agent_dir: AgentDir, run_id: str) -> Path:
    return Path(agent_dir.workdir, ".tfctl", "runs", run_id)


def _gone(pid: int) -> bool:
    """The process has exited (a zombie left to init counts as gone)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except OSError:
        return True


def _reboot_records(agent_dir: AgentDir, run_id: str, names: list[str]) -> None:
    """What a host restart leaves: every process of the run gone, its records of that boot."""
    run_dir = _run_dir(agent_dir, run_id)
    paths = [run_dir / (name.replace(":", "-") + ".pid.json") for name in names]
    records = [json.loads(path.read_text()) for path in paths]
    for keeper in {r["supervisor_pid"] for r in records}:  # first: it must not record the ends
        os.kill(keeper, signal.SIGKILL)
        wait_for(lambda keeper=keeper: _gone(keeper))
    for record in records:
        os.kill(record["pid"], signal.SIGKILL)
        wait_for(lambda record=record: _gone(record["pid"]))
    for path, record in zip(paths, records, strict=True):
        path.write_text(json.dumps(dict(record, boot_id=EARLIER_BOOT)))


def test_the_boot_is_read_from_proc() -> None:
    assert boot.boot_id() == Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    btime = next(int(line.split()[1]) for line in Path("/proc/stat").read_text().splitlines()
                 if line.startswith("btime "))
    assert boot.booted_at() == btime
    assert not boot.from_other_boot({"boot_id": boot.boot_id()})
    assert boot.from_other_boot({"boot_id": EARLIER_BOOT})
    assert not boot.from_other_boot({})  # a record without one is not called lost on a guess


def test_records_carry_the_boot_they_were_written_in(agent_dir: AgentDir) -> None:
    run_id = agent_dir.start([sh("worker:0", SLEEPER)])
    run_dir = _run_dir(agent_dir, run_id)
    assert json.loads((run_dir / "manifest.json").read_text())["boot_id"] == boot.boot_id()
    wait_for(lambda: (run_dir / "worker-0.pid.json").exists())
    assert json.loads((run_dir / "worker-0.pid.json").read_text())["boot_id"] == boot.boot_id()


def test_a_task_of_an_earlier_boot_is_lost_with_the_boot_time(agent_dir: AgentDir) -> None:
    run_id = agent_dir.start([sh("worker:0", SLEEPER), sh("worker:1", SLEEPER)])
    agent_dir.wait_state(run_id, "worker:1", ("running",))
    _reboot_records(agent_dir, run_id, ["worker:0"])
    st = agent_dir.status(run_id)
    assert st["worker:0"]["state"] == "lost"
    assert st["worker:0"]["host_restarted_at"] == boot.booted_at()
    assert (st["worker:0"]["pid"], st["worker:0"]["supervisor_pid"]) == (None, None)
    assert st["worker:1"]["state"] == "running" and st["worker:1"]["host_restarted_at"] is None


def test_a_record_of_an_earlier_boot_never_names_a_live_process(agent_dir: AgentDir) -> None:
    """After a reboot a pid and its start ticks may name another process: here they name the
    very processes that run, and the record, of another boot, still does not."""
    run_id = agent_dir.start([sh("worker:0", SLEEPER)])
    agent_dir.wait_state(run_id, "worker:0", ("running",))
    path = _run_dir(agent_dir, run_id) / "worker-0.pid.json"
    record = json.loads(path.read_text())
    path.write_text(json.dumps(dict(record, boot_id=EARLIER_BOOT)))
    assert agent_dir.status(run_id)["worker:0"]["state"] == "lost"
    assert ok("runs", workdir=agent_dir.workdir)["runs"][0]["live"] is True  # its tagged processes


def test_restart_lost_starts_the_task_again_with_its_record(agent_dir: AgentDir) -> None:
    run_id = agent_dir.start([sh("worker:0", "echo started with $TFCTL_TASK $EXTRA; exec sleep 60",
                           env={"EXTRA": "planned-env"}),
                        sh("worker:1", SLEEPER)])
    agent_dir.wait_state(run_id, "worker:1", ("running",))
    _reboot_records(agent_dir, run_id, ["worker:0", "worker:1"])
    answer = ok("restart_lost", workdir=agent_dir.workdir, run_id=run_id, tasks=["worker:0"])
    assert list(answer["tasks"]) == ["worker:0"]
    assert answer["host_restarted_at"] == boot.booted_at()
    st = agent_dir.wait_state(run_id, "worker:0", ("running",))
    assert st["host_restarted_at"] is None
    assert agent_dir.status(run_id)["worker:1"]["state"] == "lost"  # only the task named
    log = agent_dir.log(run_id, "worker:0")
    assert "starting worker:0 again" in log and "its host restarted at" in log
    assert log.count("started with worker:0 planned-env") == 2  # the same env, log appended
    answer = ok("restart_lost", workdir=agent_dir.workdir, run_id=run_id)  # every lost one left
    assert list(answer["tasks"]) == ["worker:1"]
    assert agent_dir.wait_state(run_id, "worker:1", ("running",))["state"] == "running"


@pytest.mark.parametrize(("tasks", "kind", "words"), [
    (["worker:0"], "not_lost", "worker:0 of run {run} is running on this host, not lost"),
    (["worker:9"], "unknown_task", "has no task worker:9"),
    (None, "nothing_lost", "no task of run {run} is lost on this host (worker:0 running)"),
])
def test_restart_lost_refuses_what_is_not_lost(
    agent_dir: AgentDir, tasks: list[str] | None, kind: str, words: str
) -> None:
    run_id = agent_dir.start([sh("worker:0", SLEEPER)])
    pid = agent_dir.wait_state(run_id, "worker:0", ("running",))["pid"]
    answer = call("restart_lost", workdir=agent_dir.workdir, run_id=run_id, tasks=tasks)
    assert (answer["ok"], answer["kind"]) == (False, kind)
    assert words.format(run=run_id) in answer["error"]
    assert tagged(run_id) == {pid: "worker:0"}  # the task as it was, nothing started


def test_restart_lost_refuses_a_run_that_has_ended(agent_dir: AgentDir) -> None:
    run_id = agent_dir.start([sh("worker:0", SLEEPER)])
    agent_dir.wait_state(run_id, "worker:0", ("running",))
    _reboot_records(agent_dir, run_id, ["worker:0"])
    ok("finish", workdir=agent_dir.workdir, run_id=run_id, status={"state": "finished",
                                                             "cause": "chief:0 ended"})
    answer = call("restart_lost", workdir=agent_dir.workdir, run_id=run_id)
    assert (answer["ok"], answer["kind"]) == (False, "run_ended")
    assert "has ended (chief:0 ended)" in answer["error"]
    assert not tagged(run_id)


def test_restart_lost_starts_the_watcher_of_the_run_again(agent_dir: AgentDir) -> None:
    end: dict[str, Any] = {"mode": "any", "deciders": [{"name": "worker:0", "host": "here"}]}
    run_id = agent_dir.start([sh("worker:0", SLEEPER)], host="here", end=end)
    agent_dir.wait_state(run_id, "worker:0", ("running",))
    run_dir = _run_dir(agent_dir, run_id)
    watcher = json.loads((run_dir / "keeper.pid.json").read_text())
    assert watcher["boot_id"] == boot.boot_id()
    os.kill(watcher["pid"], signal.SIGKILL)
    _reboot_records(agent_dir, run_id, ["worker:0"])
    (run_dir / "keeper.pid.json").write_text(json.dumps(dict(watcher, boot_id=EARLIER_BOOT)))
    answer = ok("restart_lost", workdir=agent_dir.workdir, run_id=run_id)
    assert answer["keeper_pid"] not in (None, watcher["pid"])
    again = json.loads((run_dir / "keeper.pid.json").read_text())
    assert (again["pid"], again["boot_id"]) == (answer["keeper_pid"], boot.boot_id())
