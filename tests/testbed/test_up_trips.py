"""`up`'s one sequence on the real sshd lab: what each host is asked, whatever its state.

Every agent request, shell command and rsync a host gets is counted on the way out (the real
calls, then passed on unchanged), so these tests see what an `up` costs each host: with nothing
to sync and the setup cached, one check and one start per host and a posted mark, no shell (a
changed file adds the file's request, not a second check); in one `up` that mixes host states
(a host whose agent cannot run until the setup made its Python, a `shared_fs` host, an
ordinary one), each host gets the work its state needs and the same check → go → mark as the
others, and so does every host under `--force-setup` and a
`transport: local` host; a host that cannot be reached fails the first phase that needed it,
with nothing started. The host's own hash of the setup inputs agrees with the setup program's
(a changed input is seen); and stopping named tasks (what `status` does to an ended job's ps)
is one stop request per host, without a status read first.
"""

from __future__ import annotations

import os
import shutil
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.localcluster import local_cluster
from tests.support.testbedtools import FOREVER, cmdline_of, job_dir, processes_of_run
from tfctl.inventory.load import load_inventory
from tfctl.remote.connect.fleet import FleetResult
from tfctl.remote.connect.session import agentclient, agentops
from tfctl.remote.connect.transport import SshOptions
from tfctl.remote.controller import RunController, SyncFailed, UpOptions
from tfctl.remote.errors import HostUnreachable, LaunchFailed, RemoteError
from tfctl.remote.runs.setup import SetupOutcome
from tfctl.remote.runs.steps import NoHooks
from tfctl.remote.sync.result import SyncResult

pytestmark = pytest.mark.testbed


@pytest.fixture
def asked(monkeypatch: pytest.MonkeyPatch) -> Iterator[Counter[str]]:
    """(host, what) → how often: agent ops, posted ops, shell commands and streams."""
    seen: Counter[str] = Counter()
    call, post = agentclient.call, agentclient.post

    def counted_call(t: Any, op: str, args: Any = None, timeout_s: Any = 60.0) -> Any:
        seen[f"{t.host.name} {op}"] += 1
        return call(t, op, args, timeout_s)

    def counted_post(t: Any, op: str, args: Any = None) -> None:
        seen[f"{t.host.name} post {op}"] += 1
        post(t, op, args)

    monkeypatch.setattr(agentclient, "call", counted_call)
    monkeypatch.setattr(agentclient, "post", counted_post)
    from tfctl.remote.connect.ssh import SshTransport
    from tfctl.remote.sync import rsync

    for method in ("run", "stream"):
        real = getattr(SshTransport, method)

        def counted(self: Any, command: str, *a: Any, _real: Any = real, _m: str = method,
                    **kw: Any) -> Any:
            seen[f"{self.host.name} shell {_m}"] += 1
            return _real(self, command, *a, **kw)

        monkeypatch.setattr(SshTransport, method, counted)
    real_rsync = rsync.run_rsync

    def counted_rsync(t: Any, *a: Any, **kw: Any) -> Any:
        seen[f"{t.host.name} rsync"] += 1
        return real_rsync(t, *a, **kw)

    monkeypatch.setattr(rsync, "run_rsync", counted_rsync)
    yield seen


def _per_host(asked: Counter[str], hosts: list[str]) -> dict[str, list[str]]:
    """host → what it was asked, sorted, each as often as it was."""
    return {h: sorted(k.split(" ", 1)[1] for k, n in asked.items() for _ in range(n)
                      if k.startswith(h + " ")) for h in hosts}


class _Heard(NoHooks):
    """What `up` told its front end: the sync's and the setup's results, the run id."""

    def __init__(self) -> None:
        self.sync: FleetResult[SyncResult] | None = None
        self.setup: FleetResult[SetupOutcome] | None = None
        self.run_id: str | None = None

    def synced(self, result: FleetResult[SyncResult]) -> None:
        self.sync = result

    def setup_done(self, result: FleetResult[SetupOutcome], errors: list[RemoteError],
                   seconds: float) -> None:
        self.setup = result

    def run_started(self, run_id: str) -> None:
        self.run_id = run_id


def _up(inv: Path, hooks: NoHooks | None = None, **options: Any) -> tuple[str, RunController]:
    controller = RunController(load_inventory(inv))
    return controller.up(UpOptions(**options), hooks=hooks), controller


def test_a_no_change_up_is_one_check_and_one_start_per_host(testbed, tmp_path: Path,  # type: ignore[no-untyped-def]
                                                            asked: Counter[str],
                                                            down_after) -> None:
    d = job_dir(tmp_path)
    (d / "requirements.txt").write_text("six\n")
    job = dict(FOREVER, setup=["echo set up"], setup_inputs=["requirements.txt"])
    inv = testbed.write_inventory(d / "cluster.yaml", job)
    down_after.append(inv)
    first, controller = _up(inv)  # syncs, runs the setup
    controller.down(grace_s=1)
    controller.close()
    assert any("shell stream" in k for k in asked)  # the setup program ran
    asked.clear()

    run_id, controller = _up(inv)
    try:
        assert _per_host(asked, testbed.names) == {h: ["post up_mark", "up_check", "up_go"]
                                               for h in testbed.names}
        # ... and it is the run `up` verified: every task up, the status it ended with
        assert {t.state for t in controller.up_status.tasks} == {"running"}  # type: ignore[union-attr]
        assert len(processes_of_run(run_id)) == len(controller.up_status.tasks)  # type: ignore[union-attr]
        for host in testbed.names:  # the copy of the cached setup's log, and the watchers' mark
            run_dir = testbed.host(host).workdir / ".tfctl" / "runs" / run_id
            assert "set up" in (run_dir / "setup.log").read_text()
            deadline = time.monotonic() + 10
            while not (run_dir / "up.json").exists() and time.monotonic() < deadline:
                time.sleep(0.05)
            assert (run_dir / "up.json").exists()
    finally:
        controller.down(grace_s=1)
        controller.close()
    assert run_id != first


def test_one_up_takes_each_host_as_it_is(testbed, tmp_path: Path,  # type: ignore[no-untyped-def]
                                         asked: Counter[str], down_after) -> None:
    """h1 as usual; h2 with no Python for the agent until its setup makes the venv its
    `python:` names (a `python3` that does not start stands first on its PATH); h3 `shared_fs`,
    seeing h1's files. One `up` checks all three, syncs h1 (a few files) and h2 (the whole tree,
    through the shell: its agent cannot say what differs), never h3, sets up h1 and h2 and then
    h3 (h1's files changed under it), checks those hosts again and starts every task, h2's
    under the venv's Python. Once set up, each is one check, one start and the mark."""
    d = job_dir(tmp_path)
    (d / "requirements.txt").write_text("six\n")
    venv = {h: testbed.host(h).workdir / ".venv" for h in testbed.names}
    for host in testbed.hosts:  # no venv and no setup record from an earlier test
        shutil.rmtree(venv[host.name], ignore_errors=True)
        shutil.rmtree(host.workdir / ".tfctl" / "setup", ignore_errors=True)
    h3 = testbed.host("h3").workdir
    (h3 / "job.py").unlink(missing_ok=True)
    (h3 / "job.py").symlink_to(testbed.host("h1").workdir / "job.py")  # h1's synced copy
    job = dict(FOREVER, setup=[f"{testbed.python} -m venv --without-pip .venv"],
               setup_inputs=["requirements.txt"])
    inv = testbed.write_inventory(d / "cluster.yaml", job, host_fields={
        "h2": {"python": str(venv["h2"] / "bin" / "python")}, "h3": {"shared_fs": True}})
    down_after.append(inv)
    testbed.write_tool("h2", "python3", "#!/bin/sh\nexit 127\n")  # no interpreter for the agent
    heard = _Heard()
    try:
        controller = RunController(load_inventory(inv))
        run_id = controller.up(UpOptions(), hooks=heard)
    finally:
        testbed.remove_from_path("h2", "python3")
    try:
        assert _per_host(asked, testbed.names) == {
            "h1": ["post up_mark", "put_files", "shell stream", "up_check", "up_check",
                   "up_go"],
            "h2": ["post up_mark", "rsync", "shell run", "shell stream", "up_check",
                   "up_check", "up_go"],  # the first check found no Python
            "h3": ["post up_mark", "shell stream", "up_check", "up_check", "up_go"]}
        assert heard.sync is not None and heard.setup is not None
        assert {h: r.method for h, r in heard.sync.succeeded.items()} == {
            "h1": "agent", "h2": "rsync", "h3": "skipped"}
        assert {h: o.state for h, o in heard.setup.succeeded.items()} == {
            "h1": "done", "h2": "done", "h3": "done"}
        assert heard.run_id == run_id
        status = controller.up_status
        assert status is not None and {t.state for t in status.tasks} == {"running"}
        on_h2 = {t.name for t in status.tasks if t.host == "h2"}
        tasks = processes_of_run(run_id)
        assert sorted(env["TFCTL_TASK"] for env in tasks.values()) == sorted(
            t.name for t in status.tasks)
        for pid, env in tasks.items():
            if env["TFCTL_TASK"] in on_h2:
                assert cmdline_of(pid)[0] == str(venv["h2"] / "bin" / "python")
    finally:
        controller.down(grace_s=1)
        controller.close()

    asked.clear()  # set up: every host as usual
    heard = _Heard()
    run_id, controller = _up(inv, hooks=heard)
    per_host = _per_host(asked, testbed.names)
    controller.down(grace_s=1)
    controller.close()
    assert per_host == {h: ["post up_mark", "up_check", "up_go"] for h in testbed.names}
    assert heard.setup is not None
    assert {o.state for o in heard.setup.succeeded.values()} == {"skipped"}

    asked.clear()  # --force-setup: the setup program on every host, then the same sequence
    run_id, controller = _up(inv, force_setup=True)
    per_host = _per_host(asked, testbed.names)
    controller.down(grace_s=1)
    controller.close()
    assert per_host == {h: ["post up_mark", "shell stream", "up_check", "up_check", "up_go"]
                        for h in testbed.names}


def test_a_changed_file_is_put_without_a_second_check(testbed, tmp_path: Path,  # type: ignore[no-untyped-def]
                                                     asked: Counter[str], down_after) -> None:
    """A code change (no setup): each host gets the file over its agent session between its
    check and its start, and is not checked again (a few files change no GPU and no port);
    the task runs the changed code."""
    d = job_dir(tmp_path)
    inv = testbed.write_inventory(d / "cluster.yaml", FOREVER)
    down_after.append(inv)
    first, controller = _up(inv)
    controller.down(grace_s=1)
    controller.close()
    (d / "job.py").write_text((d / "job.py").read_text() + "\n# changed\n")
    asked.clear()
    run_id, controller = _up(inv)
    try:
        assert _per_host(asked, testbed.names) == {
            h: ["post up_mark", "put_files", "up_check", "up_go"] for h in testbed.names}
        assert {t.state for t in controller.up_status.tasks} == {"running"}  # type: ignore[union-attr]
        for host in testbed.names:
            assert (testbed.host(host).workdir / "job.py").read_text().endswith("# changed\n")
    finally:
        controller.down(grace_s=1)
        controller.close()
    assert run_id != first


def test_a_local_host_takes_the_same_sequence(tmp_path: Path, asked: Counter[str]) -> None:
    """`transport: local`: each agent request is a process of its own, the same requests as
    a host over SSH (the mark, with no session to post it on, is a request answered)."""
    inv = local_cluster(tmp_path, {"a": {"ps": 1}})
    for first in (True, False):
        asked.clear()
        run_id, controller = _up(inv)
        try:
            ops = [k for k in _per_host(asked, ["a"])["a"] if not k.startswith("shell ")]
            assert ops == (["post up_mark", "put_files", "up_check", "up_go", "up_mark"]
                           if first else ["post up_mark", "up_check", "up_go", "up_mark"])
            assert controller.up_status is not None
            assert len(processes_of_run(run_id)) == len(controller.up_status.tasks) > 0
        finally:
            controller.down(grace_s=1)
            controller.close()


@pytest.mark.parametrize("options, job, fails", [
    ({}, {}, SyncFailed),
    ({"sync": False}, {"setup": ["true"]}, HostUnreachable),
    ({"sync": False}, {}, LaunchFailed),
], ids=["sync", "setup", "start"])
def test_an_unreachable_host_fails_the_first_phase_that_needs_it(  # type: ignore[no-untyped-def]
        healed, tmp_path: Path, options: dict[str, Any], job: dict[str, Any],
        fails: type[RemoteError]) -> None:
    """h3's sshd is stopped: the sync names it where there is one (after syncing the others),
    else the setup, else the start; no run id was chosen and nothing started anywhere."""
    testbed = healed
    inv = testbed.write_inventory(job_dir(tmp_path) / "cluster.yaml", dict(FOREVER, **job))
    testbed.stop_sshd("h3")
    heard = _Heard()
    controller = RunController(load_inventory(inv), SshOptions(connect_timeout_s=2))
    with controller, pytest.raises(RemoteError) as raised:
        controller.up(UpOptions(**options), hooks=heard)
    assert type(raised.value) is fails and raised.value.host == "h3"
    assert str(raised.value).startswith("h3: ")
    if fails is SyncFailed:
        assert heard.sync is not None and set(heard.sync.failed) == {"h3"}
        assert set(heard.sync.succeeded) == {"h1", "h2"}
    if job.get("setup"):
        assert heard.setup is not None and set(heard.setup.failed) == {"h3"}
    assert heard.run_id is None and controller.starting_run_id is None


def test_the_hosts_setup_hash_is_the_setup_programs(testbed, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    d = job_dir(tmp_path)
    (d / "reqs").mkdir()
    (d / "reqs" / "b.txt").write_text("b\n")
    (d / "reqs" / "a.txt").write_text("a\n")
    (d / "top.txt").write_text("top\n")
    job = dict(FOREVER, setup=["true"], setup_inputs=["reqs", "top.txt", "absent.txt"])
    inv = testbed.write_inventory(d / "cluster.yaml", job, hosts=["h1"])
    with RunController(load_inventory(inv)) as controller:
        ran = controller.setup(UpOptions())
    outcome = ran.succeeded["h1"]
    assert outcome.state == "done" and outcome.inputs_hash

    def check() -> dict[str, Any]:
        with RunController(load_inventory(inv)) as controller:
            t = controller.fleet.transport("h1")
            found = agentops.up_check(t, t.host.workdir, entries=None, setup={
                "digest": _digest(["true"]), "inputs": ["reqs", "top.txt", "absent.txt"]},
                gpus_script=None, port_numbers=())
        assert found.setup is not None
        return dict(found.setup)

    cached = check()
    assert cached["cached"] and cached["hash"] == outcome.inputs_hash
    assert cached["log"] == outcome.log_path
    workdir = testbed.host("h1").workdir
    stamp = time.time() + 5  # a touched input counts as a change, as with make
    os.utime(workdir / "reqs" / "a.txt", (stamp, stamp))
    changed = check()
    assert not changed["cached"] and changed["hash"] != outcome.inputs_hash


def _digest(commands: list[str]) -> str:
    from tfctl.remote.runs.setup import commands_digest

    return commands_digest(commands)


def test_stopping_named_tasks_is_one_stop_request_per_host(testbed, tmp_path: Path,  # type: ignore[no-untyped-def]
                                                          asked: Counter[str],
                                                          down_after) -> None:
    """What `status` does when it finds the job ended (its ps stopped), and `restart`: each
    host stops those of the named tasks it runs, known from its manifest, no status read."""
    from tfctl.remote.runs.stop import stop_run, stopped_tasks

    inv = testbed.write_inventory(job_dir(tmp_path) / "cluster.yaml", FOREVER)
    down_after.append(inv)
    run_id, controller = _up(inv)
    try:
        asked.clear()
        ps_on_h1 = next(t.name for t in controller.up_status.tasks  # type: ignore[union-attr]
                        if t.host == "h1" and t.type == "ps")
        result = stop_run(controller.fleet, run_id, testbed.names, grace_s=1, tasks=[ps_on_h1])
        assert stopped_tasks(result) == [ps_on_h1] and not result.failed
        assert sorted(asked.elements()) == sorted(f"{h} stop" for h in testbed.names)
        left = {env["TFCTL_TASK"] for env in processes_of_run(run_id).values()}
        assert ps_on_h1 not in left
        assert left >= {t.name for t in controller.up_status.tasks  # type: ignore[union-attr]
                        if t.name != ps_on_h1}
    finally:
        controller.down(grace_s=1)
        controller.close()
