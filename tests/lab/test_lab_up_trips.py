"""`up` in two requests per host, on the real sshd lab: what each host is asked.

Every agent request and every shell command a host gets is counted on the way out (the real
calls, then passed on unchanged), so these tests see what an `up` costs each host: with nothing
to sync and the setup cached, one check and one start per host and a posted mark, no shell; the
host's own hash of the setup inputs agrees with the setup program's (a changed input is seen);
and stopping named tasks (what `status` does to an ended job's ps) is one stop request per host,
without a status read first.
"""

from __future__ import annotations

import os
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.labtools import FOREVER, job_dir, processes_of_run
from tfctl.inventory.load import load_inventory
from tfctl.remote.connect import agentclient, agentops
from tfctl.remote.runs.controller import RunController, UpOptions

pytestmark = pytest.mark.lab


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

    for method in ("run", "stream"):
        real = getattr(SshTransport, method)

        def counted(self: Any, command: str, *a: Any, _real: Any = real, _m: str = method,
                    **kw: Any) -> Any:
            seen[f"{self.host.name} shell {_m}"] += 1
            return _real(self, command, *a, **kw)

        monkeypatch.setattr(SshTransport, method, counted)
    yield seen


def _up(inv: Path, **options: Any) -> tuple[str, RunController]:
    controller = RunController(load_inventory(inv))
    return controller.up(UpOptions(**options)), controller


def test_a_no_change_up_is_one_check_and_one_start_per_host(lab, tmp_path: Path,  # type: ignore[no-untyped-def]
                                                            asked: Counter[str],
                                                            down_after) -> None:
    d = job_dir(tmp_path)
    (d / "requirements.txt").write_text("six\n")
    job = dict(FOREVER, setup=["echo set up"], setup_inputs=["requirements.txt"])
    inv = lab.write_inventory(d / "cluster.yaml", job)
    down_after.append(inv)
    first, controller = _up(inv)  # syncs, runs the setup
    controller.down(grace_s=1)
    controller.close()
    assert any("shell stream" in k for k in asked)  # the setup program ran
    asked.clear()

    run_id, controller = _up(inv)
    try:
        per_host = {h: sorted(k.split(" ", 1)[1] for k, n in asked.items()
                              for _ in range(n) if k.startswith(h + " ")) for h in lab.names}
        assert per_host == {h: ["post up_mark", "up_check", "up_go"] for h in lab.names}
        # ... and it is the run `up` verified: every task up, the status it ended with
        assert {t.state for t in controller.up_status.tasks} == {"running"}  # type: ignore[union-attr]
        assert len(processes_of_run(run_id)) == len(controller.up_status.tasks)  # type: ignore[union-attr]
        for host in lab.names:  # the copy of the cached setup's log, and the watchers' mark
            run_dir = lab.host(host).workdir / ".tfctl" / "runs" / run_id
            assert "set up" in (run_dir / "setup.log").read_text()
            deadline = time.monotonic() + 10
            while not (run_dir / "up.json").exists() and time.monotonic() < deadline:
                time.sleep(0.05)
            assert (run_dir / "up.json").exists()
    finally:
        controller.down(grace_s=1)
        controller.close()
    assert run_id != first


def test_the_hosts_setup_hash_is_the_setup_programs(lab, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    d = job_dir(tmp_path)
    (d / "reqs").mkdir()
    (d / "reqs" / "b.txt").write_text("b\n")
    (d / "reqs" / "a.txt").write_text("a\n")
    (d / "top.txt").write_text("top\n")
    job = dict(FOREVER, setup=["true"], setup_inputs=["reqs", "top.txt", "absent.txt"])
    inv = lab.write_inventory(d / "cluster.yaml", job, hosts=["h1"])
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
    workdir = lab.host("h1").workdir
    stamp = time.time() + 5  # a touched input counts as a change, as with make
    os.utime(workdir / "reqs" / "a.txt", (stamp, stamp))
    changed = check()
    assert not changed["cached"] and changed["hash"] != outcome.inputs_hash


def _digest(commands: list[str]) -> str:
    from tfctl.remote.runs.setup import commands_digest

    return commands_digest(commands)


def test_stopping_named_tasks_is_one_stop_request_per_host(lab, tmp_path: Path,  # type: ignore[no-untyped-def]
                                                          asked: Counter[str],
                                                          down_after) -> None:
    """What `status` does when it finds the job ended (its ps stopped), and `restart`: each
    host stops those of the named tasks it runs, known from its manifest, no status read."""
    from tfctl.remote.runs.stop import stop_run, stopped_tasks

    inv = lab.write_inventory(job_dir(tmp_path) / "cluster.yaml", FOREVER)
    down_after.append(inv)
    run_id, controller = _up(inv)
    try:
        asked.clear()
        ps_on_h1 = next(t.name for t in controller.up_status.tasks  # type: ignore[union-attr]
                        if t.host == "h1" and t.type == "ps")
        result = stop_run(controller.fleet, run_id, lab.names, grace_s=1, tasks=[ps_on_h1])
        assert stopped_tasks(result) == [ps_on_h1] and not result.failed
        assert sorted(asked.elements()) == sorted(f"{h} stop" for h in lab.names)
        left = {env["TFCTL_TASK"] for env in processes_of_run(run_id).values()}
        assert ps_on_h1 not in left
        assert left >= {t.name for t in controller.up_status.tasks  # type: ignore[union-attr]
                        if t.name != ps_on_h1}
    finally:
        controller.down(grace_s=1)
        controller.close()
