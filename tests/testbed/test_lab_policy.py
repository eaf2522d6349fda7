"""The lab policy as a lab meets it: a file of the hosts' administrator (here each testbed host's
TFCTL_LAB_POLICY, its own `etc/tfctl/lab.yaml`), a policy of seconds, the stand-in nvidia-smi
reporting the utilization each process declares (TFCTL_TEST_GPU_UTIL; none declared: busy).

A `tfctl run` left at 0 % is told to its owner (the job's notify), then stopped by its own
watcher with no client connected, its GPU freed and `runs` saying why; one kept busy is not;
`status` and every user's `lab` say when an idle run stops; another user's idle process is shown
with how long, never touched; a file another user owns is ignored and said once; `tfctl lab
policy` shows each host's policy and the host that disagrees. A session (a run whose record
says `session: shell`) under `applies_to: [sessions]` is stopped, a run beside it is not; and
two real `tfctl shell` sessions in terminals: the idle one stopped, the busy one not.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.agentdriver import AgentDir, ok, sh, tagged
from tests.support.fakes import NVIDIA_SMI_STANDIN
from tests.support.testbed.testbed import Testbed
from tests.support.testbed.users import ALICE, BOB
from tests.support.testbedtools import (
    FOREVER,
    job_dir,
    processes_of_run,
    tfctl,
    user_inventory,
    wait_until,
)
from tests.support.tmuxpane import Pane

pytestmark = pytest.mark.testbed

SECONDS = "idle: {below_util_pct: 5, warn_after: 5s, stop_after: 15s, applies_to: [%s]}\n"
NOTIFY = 'printf "%s|%s\\n" "$TFCTL_REASON" "$TFCTL_CAUSE" >> "policy-$TFCTL_RUN_ID.txt"'
IDLE = ["env", "TFCTL_TEST_GPU_UTIL=0", "sleep", "300"]
"""A command that holds its GPU and computes nothing (a forgotten notebook's kernel)."""
BUSY = ["sleep", "300"]
"""A command the stand-in sees computing on its GPU (no utilization declared: 90-99 %)."""


@pytest.fixture
def lab_policy(testbed: Testbed) -> Iterator[Callable[..., Path]]:
    """`place(host, text, owner_uid=0)`: the host's lab policy file, as its administrator
    writes it; every one is removed after the test (the hosts then have none, as before)."""
    placed: list[Path] = []

    def place(host: str, text: str, owner_uid: int = 0) -> Path:
        path = testbed.policy_file(host)
        for folder in (path.parent.parent, path.parent):
            folder.mkdir(mode=0o755, exist_ok=True)
            folder.chmod(0o755)
        path.write_text(text)
        path.chmod(0o644)
        os.chown(path, owner_uid, owner_uid)
        placed.append(path)
        return path

    yield place
    for path in placed:
        path.unlink(missing_ok=True)


def _inventory(testbed: Testbed, tmp_path: Path, hosts: list[str]) -> Path:
    job = dict(FOREVER, notify={"command": NOTIFY})
    return testbed.write_inventory(job_dir(tmp_path) / "cluster.yaml", job, hosts=hosts,
                                   gpus={h: [0, 1] for h in hosts}, ps={h: 0 for h in hosts})


def _start(inv: Path, host: str, command: list[str]) -> tuple[str, int]:
    """A one-off run of `command` on one free GPU of `host`: its id and GPU."""
    done = tfctl(inv, "run", "--host", host, "--json", "--", *command)
    assert done.returncode == 0, done.stdout + done.stderr
    (point,) = json.loads(done.stdout)["points"]
    return point["run_id"], point["gpus"][0]


def _notices(testbed: Testbed, host: str, run_id: str) -> list[tuple[str, str]]:
    path = testbed.host(host).workdir / f"policy-{run_id}.txt"
    lines = path.read_text().splitlines() if path.exists() else []
    return [(line.split("|", 1)[0], line.split("|", 1)[1]) for line in lines if "|" in line]


def _events(testbed: Testbed, host: str, run_id: str) -> list[dict[str, Any]]:
    path = testbed.host(host).workdir / ".tfctl" / "runs" / run_id / "events.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def _runs(inv: Path) -> dict[str, dict[str, Any]]:
    done = tfctl(inv, "runs", "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    return {r["run_id"]: r for r in json.loads(done.stdout)["runs"]}


def test_an_idle_run_is_told_then_stopped_and_a_busy_one_is_not(
        gpu_testbed: Testbed, lab_policy: Callable[..., Path], tmp_path: Path) -> None:
    lab_policy("h1", SECONDS % "runs")
    inv = _inventory(gpu_testbed, tmp_path, ["h1", "h2"])
    started: list[str] = []
    try:
        idle, idle_gpu = _start(inv, "h1", IDLE)
        started.append(idle)
        busy, _ = _start(inv, "h1", BUSY)
        started.append(busy)

        told = wait_until("the owner told, then the run stopped",
                          lambda: len(_notices(gpu_testbed, "h1", idle)) >= 2 and
                          _notices(gpu_testbed, "h1", idle), 120)
        (warned, warning), (reason, cause) = told[:2]
        assert warned == "idle" and f"GPU {idle_gpu} under 5 % for" in warning, told
        assert warning.endswith("by the lab's policy (stop_after 15s)"), warning
        assert reason == "stopped", told
        assert cause.startswith(f"stopped as idle by the lab's policy: GPU {idle_gpu} under 5 %")

        ended = wait_until("runs to say why", lambda: (r := _runs(inv)[idle])["ended"] and r, 60)
        assert ended["live"] is False and ended["ended"] == cause, ended
        assert not processes_of_run(idle)
        assert not list(gpu_testbed.claims_dir("h1").glob(f"*.run.{idle}.json"))
        lab = json.loads(tfctl(inv, "lab", "--json").stdout)
        rows = {(r["host"], r["gpu"]): r for r in lab}
        assert rows[("h1", idle_gpu)]["state"] == "free", rows[("h1", idle_gpu)]

        # The busy run started with the idle one, and has outlived its stop_after: still running.
        status = json.loads(tfctl(inv, "status", "--run", busy, "--json").stdout)
        assert [t["state"] for t in status["tasks"]] == ["running"] and status["idle"] == {}
        assert not [e for e in _events(gpu_testbed, "h1", busy)
                    if e["event"] in ("idle_warning", "idle_stop")]
        assert _notices(gpu_testbed, "h1", busy) == []
    finally:
        for run_id in started:
            tfctl(inv, "down", "--run", run_id, "--grace", "1")


def test_status_and_lab_say_when_an_idle_run_stops_and_others_are_only_shown(
        gpu_testbed: Testbed, lab_policy: Callable[..., Path], tmp_path: Path) -> None:
    """h2's administrator stops idle runs after an hour (h1's after 15 s: the hosts disagree).
    A colleague's process at 0 % on h2 (not tfctl's) is shown idle with how long, and lives."""
    lab_policy("h1", SECONDS % "runs")
    lab_policy("h2", SECONDS.replace("15s", "1h") % "runs")
    colleague = int(gpu_testbed.run("h2", "CUDA_VISIBLE_DEVICES=0 TFCTL_TEST_GPU_UTIL=0 setsid "
                                          "sleep 300 </dev/null >/dev/null 2>&1 & echo $!").stdout)
    inv = _inventory(gpu_testbed, tmp_path, ["h1", "h2"])
    run_id = None
    try:
        run_id, gpu = _start(inv, "h2", IDLE)
        assert gpu == 1  # GPU 0 is the colleague's
        wait_until("the owner told", lambda: _notices(gpu_testbed, "h2", run_id), 90)
        status = tfctl(inv, "status", "--run", run_id)
        assert status.returncode == 0, status.stdout + status.stderr
        assert "on h2 (GPU 1 under 5 %) — stops at " in status.stdout, status.stdout
        assert "by the lab's policy" in status.stdout
        said = json.loads(tfctl(inv, "status", "--run", run_id, "--json").stdout)["idle"]["h2"]
        assert said["stop_at"] - said["since"] == 3600

        def both_idle() -> dict[int, dict[str, Any]] | None:
            lab = json.loads(tfctl(inv, "lab", "--json", "--idle-after", "3s").stdout)
            rows = {r["gpu"]: r for r in lab if r["host"] == "h2"}
            return rows if rows[0]["holders"] and rows[0]["holders"][0]["idle"] else None

        rows = wait_until("the colleague's process measured idle", both_idle, 60, every_s=2)
        (theirs,) = rows[0]["holders"]
        assert (theirs["kind"], theirs["pid"]) == ("process", colleague)
        assert theirs["low_util_s"] >= 3 and theirs["policy_stop_at"] is None
        (ours,) = rows[1]["holders"]
        assert ours["run_id"] == run_id and ours["policy_stop_at"] == said["stop_at"]
        table = tfctl(inv, "lab", "--idle-after", "3s", env={"COLUMNS": "300"}).stdout
        assert "by the lab's policy" in table and "idle " in table, table

        policy = tfctl(inv, "lab", "policy")
        assert policy.returncode == 0, policy.stdout + policy.stderr
        lines = policy.stdout.splitlines()
        assert lines[0].split() == ["h1", str(gpu_testbed.policy_file("h1")), "idle:", "under",
                                    "5", "%", "for", "5s", "→", "owner", "warned,", "15s", "→",
                                    "stopped", "(runs)"], policy.stdout
        assert lines[1].endswith("idle: under 5 % for 5s → owner warned, 1h → stopped (runs)")
        assert "h2 disagrees with h1: it has idle: under 5 % for 5s → owner warned, 1h" in \
            policy.stderr, policy.stderr
        as_json = json.loads(tfctl(inv, "lab", "policy", "--json").stdout)
        assert as_json["disagreeing"] == ["h2"]
        assert [h["policy"]["idle"]["stop_after_s"] for h in as_json["hosts"]] == [15.0, 3600.0]
        os.kill(colleague, 0)  # shown idle, never stopped
    finally:
        os.kill(colleague, signal.SIGKILL)
        if run_id:
            tfctl(inv, "down", "--run", run_id, "--grace", "1")


def test_a_policy_file_another_user_owns_is_ignored_and_said_once(
        shared_testbed: Testbed, lab_policy: Callable[..., Path], tmp_path: Path) -> None:
    """Bob, a user like alice, leaves a policy where the administrator's would be: alice's idle
    run is not stopped by it, her watcher says once why, `tfctl lab policy` names the file; so
    it does for the administrator's file with a mistake, with its line."""
    claims = shared_testbed.claims_dir("h1")  # root's, as an administrator makes it
    claims.mkdir(mode=0o1777, exist_ok=True)
    os.chown(claims, 0, 0)
    claims.chmod(0o1777)
    bob = shared_testbed.users[BOB]
    path = lab_policy("h1", SECONDS % "runs", owner_uid=bob.uid)
    alice = shared_testbed.users[ALICE]
    inv = user_inventory(shared_testbed, alice, tmp_path / "alice", hosts=["h1"],
                         gpus={"h1": [0, 1]}, ps={"h1": 0})
    done = tfctl(inv, "run", "--json", "--", *IDLE)  # alice's login, key and inventory
    assert done.returncode == 0, done.stdout + done.stderr
    run_id = json.loads(done.stdout)["points"][0]["run_id"]
    try:
        said = (f"the lab policy {path} is ignored: it is owned by {BOB}, not by root or the "
                "claims folder's owner")
        policy = tfctl(inv, "lab", "policy")
        assert policy.stdout.split("  ", 2)[2].strip() == f"none in force: {said}", policy.stdout
        workdir = alice.workdirs["h1"]

        def looked_twice() -> list[dict[str, Any]] | None:
            """The watcher's events once it has looked at the policy again (every 10 s) and
            the run has outlived the policy's stop_after."""
            path = workdir / ".tfctl" / "runs" / run_id / "events.jsonl"
            if not path.exists():
                return None
            events = [json.loads(x) for x in path.read_text().splitlines()]
            starts = [e["t"] for e in events if e.get("event") == "start"]
            return events if starts and time.time() - starts[0] > 22 else None

        events = wait_until("the run past stop_after", looked_twice, 60, every_s=1)
        assert [e["why"] for e in events if e["event"] == "policy_ignored"] == [said]
        assert not [e for e in events if e["event"] in ("idle_warning", "idle_stop")]
        assert processes_of_run(run_id)

        lab_policy("h1", "idle:\n  below_util_pct: 5\n  warn_after: soon\n  stop_after: 3h\n")
        policy = tfctl(inv, "lab", "policy")
        assert policy.stdout.split("  ", 2)[2].strip() == (
            f"none in force: the lab policy {path} is ignored: line 3: idle.warn_after: 'soon' is "
            "not a duration (write e.g. 45s, 30m, 1h30m, 2d)"), policy.stdout
    finally:
        tfctl(inv, "down", "--run", run_id, "--grace", "1")


def _standin_path(tmp_path: Path) -> str:
    """A folder with the stand-in nvidia-smi of two GPUs, first on the PATH."""
    folder = tmp_path / "bin"
    folder.mkdir()
    tool = folder / "nvidia-smi"
    tool.write_text(f"#!/bin/sh\nexport TFCTL_TEST_NVSMI_GPUS=2\n"
                    f'exec {sys.executable} {NVIDIA_SMI_STANDIN} "$@"\n')
    tool.chmod(0o755)
    return f"{folder}:{os.environ['PATH']}"


def test_a_session_is_stopped_as_idle_and_a_run_beside_it_is_not(
        agent_dir: AgentDir, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`applies_to: [sessions]`: a shell session (its record's `session`) at 0 % is stopped;
    a run at 0 % beside it, not a session, is left alone. The agent and watchers run here, as
    on a host whose environment names the policy file (owned by root, the test's user)."""
    path = tmp_path / "lab.yaml"
    path.write_text(SECONDS % "sessions")
    claims = tmp_path / "claims"
    claims.mkdir()
    claims.chmod(0o1777)
    tag = f"policy-{os.getpid()}"  # the stand-in sees only this test's processes
    for name, value in {"TFCTL_LAB_POLICY": str(path), "TFCTL_CLAIMS_DIR": str(claims),
                        "PATH": _standin_path(tmp_path), "TFCTL_TEST_NVSMI_TAG": tag}.items():
        monkeypatch.setenv(name, value)
    env = {"TFCTL_TEST_GPU_UTIL": "0", "TFCTL_TEST_NVSMI_TAG": tag}

    def start_on_gpu(gpu: str, **manifest: Any) -> str:
        task = sh("worker:0", "exec sleep 120", env=dict(env, CUDA_VISIBLE_DEVICES=gpu))
        task["cuda_visible_devices"] = gpu
        return agent_dir.start([task], host="here", oneoff={"command": "sleep 120"}, end={
            "mode": "any", "deciders": [{"name": "worker:0", "host": "here"}]}, **manifest)

    session = start_on_gpu("0", session="shell")
    run = start_on_gpu("1")
    finished = wait_until("the session stopped as idle", lambda: (
        Path(agent_dir.workdir, ".tfctl", "runs", session, "finished.json").exists() and
        json.loads(Path(agent_dir.workdir, ".tfctl", "runs", session, "finished.json")
                   .read_text())), 60)
    assert finished["status"]["cause"].startswith(
        "stopped as idle by the lab's policy: GPU 0 under 5 % for 0:00:1"), finished
    wait_until("the session's processes gone", lambda: not tagged(session), 20)
    runs = {r["run_id"]: r for r in ok("runs", workdir=agent_dir.workdir)["runs"]}
    assert (runs[session]["session"], runs[run]["session"]) == ("shell", "")
    assert runs[run]["live"] and tagged(run) and runs[run]["finished"] is None
    assert not list(claims.glob(f"*.run.{session}.json"))


def test_real_shell_sessions_an_idle_one_stopped_a_busy_one_not(
        gpu_testbed: Testbed, lab_policy: Callable[..., Path], tmp_path: Path) -> None:
    """The issue's own case, with `tfctl shell` itself under `applies_to: [sessions]`: the
    session whose GPU stays at 0 % is stopped (its terminal says the session ended, its GPU is
    free, `runs` says why); the one computing on its GPU beside it outlives `stop_after`.

    The stand-in counts every process with a GPU mask as a compute app, the session's host-side
    keeper (a shell that only waits) too, which computes nothing: the inventory's env declares
    0 % for every process of the sessions, and the busy session's command declares its own."""
    lab_policy("h1", SECONDS % "sessions")
    inv = gpu_testbed.write_inventory(job_dir(tmp_path) / "cluster.yaml", FOREVER, hosts=["h1"],
                                      gpus={"h1": [0, 1]}, ps={"h1": 0},
                                      env={"TFCTL_TEST_GPU_UTIL": "0"})
    before = set(_live_runs(inv))
    idle_pane = Pane(_shell_line(inv, "sleep", "300"),
                     env={**os.environ, "TERM": "xterm-256color"}, name="policy-shell-idle")
    busy_pane = None
    try:
        idle = wait_until("the idle session live", lambda: next(
            iter(set(_live_runs(inv)) - before), None), 90)
        busy_pane = Pane(_shell_line(inv, "env", "TFCTL_TEST_GPU_UTIL=95", "sleep", "300"),
                         env={**os.environ, "TERM": "xterm-256color"}, name="policy-shell-busy")
        busy = wait_until("the busy session live", lambda: next(
            iter(set(_live_runs(inv)) - before - {idle}), None), 90)
        ended = wait_until("the idle session stopped, and runs saying why",
                           lambda: (r := _runs(inv)[idle])["ended"] and r, 120)
        assert ended["ended"].startswith("stopped as idle by the lab's policy: GPU "), ended
        idle_pane.wait("the idle shell's end", lambda s: "tfctl-exit=" in s, timeout_s=60)
        assert not processes_of_run(idle)
        # The claim goes as the keeper's last act, once its tasks' ends are recorded.
        wait_until("the idle session's claim released", lambda: not list(
            gpu_testbed.claims_dir("h1").glob(f"*.run.{idle}.json")), 30)
        status = json.loads(tfctl(inv, "status", "--run", busy, "--json").stdout)
        assert [(t["state"], t["session"]) for t in status["tasks"]] == [("running", "shell")]
        assert status["idle"] == {}
    finally:
        idle_pane.close()
        if busy_pane is not None:
            busy_pane.close()
    wait_until("every session's run ended", lambda: not set(_live_runs(inv)) - before, 60)


def _shell_line(inv: Path, *command: str) -> str:
    """`tfctl shell --gpus 1 -- COMMAND` in a terminal, which then says how it ended."""
    return (f"cd {shlex.quote(str(inv.parent))} && {shlex.quote(sys.executable)} -m tfctl.tui "
            f"-i {shlex.quote(str(inv))} shell --gpus 1 -- {shlex.join(command)}"
            "; echo tfctl-exit=$?; exec sleep 600")


def _live_runs(inv: Path) -> dict[str, dict[str, Any]]:
    return {run_id: r for run_id, r in _runs(inv).items() if r.get("live")}
