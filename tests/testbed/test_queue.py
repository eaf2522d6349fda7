"""`tfctl up --when-free` on the lab shared by two users: first come, first served, each job
after the previous one's run ended, with the terminals that queued them closed meanwhile; and a
start that lost a race for its GPUs, which waits again.

alice and bob (tests/support/testbed/users.py: real Unix users with their own keys and inventories)
both want h1's GPU 0, which carol holds by hand; each queues from a terminal (a tmux session) that
is then closed. Each user's client keeps its own records (`XDG_CACHE_HOME`), as two laptops would.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import signal
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.support.testbed.testbed import Testbed
from tests.support.testbed.users import ALICE, BOB, CAROL, LabUser, can_add_users
from tests.support.testbedtools import FOREVER, job_dir, tfctl, user_inventory, wait_until
from tests.support.tmuxpane import Pane

needs_users = pytest.mark.skipif(not can_add_users(), reason="other Unix users need root")


def _client(testbed: Testbed, user: LabUser, folder: Path) -> tuple[Path, dict[str, str]]:
    """The user's inventory (h1's GPU 0) and the environment of their own laptop."""
    inv = user_inventory(testbed, user, folder, hosts=["h1"], gpus={"h1": [0]}, ps={"h1": 0},
                         name=f"job-{user.name}")
    return inv, {"XDG_CACHE_HOME": str(folder / "cache"), "TFCTL_QUEUE_POLL_S": "1"}


def _queue_in_a_terminal(inv: Path, env: dict[str, str]) -> dict[str, Any]:
    """`tfctl up --when-free` typed in a terminal that is closed right after it answered."""
    out = inv.parent / "queued.json"
    command = (f"cd {shlex.quote(str(inv.parent))} && {shlex.quote(sys.executable)} -m "
               f"tfctl.tui -i {shlex.quote(str(inv))} up --when-free --timeout 10m --json "
               f"> {out}.tmp 2> {out}.err; mv {out}.tmp {out}; exec sleep 600")
    pane = Pane(command, env={**os.environ, **env}, name="queue")
    try:
        wait_until("the job queued", out.exists, 60)
    finally:
        pane.close()  # the terminal closes: SIGHUP to what runs in it
    return dict(json.loads(out.read_text()))


def _record(env: dict[str, str], ticket: str) -> dict[str, Any]:
    return dict(json.loads((Path(env["XDG_CACHE_HOME"]) / "tfctl" / "queue"
                            / f"{ticket}.json").read_text()))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"


@needs_users
def test_two_users_jobs_start_first_come_first_served(
    shared_testbed: Testbed, tmp_path: Path
) -> None:
    testbed = shared_testbed
    alice, bob = testbed.users[ALICE], testbed.users[BOB]
    mine, alice_env = _client(testbed, alice, tmp_path / "alice")
    theirs, bob_env = _client(testbed, bob, tmp_path / "bob")
    carol = int(testbed.run("h1", f"setpriv --reuid={CAROL} --regid={CAROL} --init-groups bash -c "
                              "'CUDA_VISIBLE_DEVICES=0 setsid sleep 300 </dev/null >/dev/null "
                              "2>&1 & echo $!'").stdout)
    first = second = None
    try:
        first = _queue_in_a_terminal(mine, alice_env)
        assert first["positions"] == {"h1": 1}
        assert f"GPU 0: held by {CAROL} (pid {carol} sleep 300)" in first["waiting_for"]["h1"]
        second = _queue_in_a_terminal(theirs, bob_env)
        assert second["positions"] == {"h1": 2}
        assert f"{ALICE}'s {first['id']}" in second["waiting_for"]["h1"]
        # both terminals are closed; both waiters wait on
        assert _alive(first["waiter_pid"]) and _alive(second["waiter_pid"])

        line = tfctl(theirs, "queue", "--json", env=bob_env)
        assert line.returncode == 0, line.stderr
        listed = json.loads(line.stdout)
        assert [(t["position"], t["id"], t["user"], t["wants"]["gpus"], t["mine"])
                for t in listed["hosts"]["h1"]] == [
            (1, first["id"], ALICE, [0], False), (2, second["id"], BOB, [0], True)]
        shown = tfctl(theirs, "queue", env=bob_env)
        assert f"2. {second['id']}  {BOB}  job job-{BOB}  for GPU 0" in shown.stdout

        # carol lets go: alice's job starts, bob's waits for it
        os.kill(carol, signal.SIGKILL)
        started = wait_until("alice's job started", lambda: _record(
            alice_env, first["id"])["state"] != "waiting" and _record(alice_env, first["id"]), 120)
        assert started["state"] == "started", started
        alice_run = started["run_id"]
        claim = testbed.claims_dir("h1") / f"{ALICE}.run.{alice_run}.json"
        assert claim.exists()
        # bob's waiter, at its next look, waits for alice's run (a slow machine: a few looks)
        waiting = wait_until("bob waits for alice's run", lambda: alice_run in (
            _record(bob_env, second["id"])["why"] or "") and _record(bob_env, second["id"]), 60)
        assert waiting["state"] == "waiting", waiting
        time.sleep(3)  # it looks again a few times, and still waits
        assert _record(bob_env, second["id"])["state"] == "waiting"
        after = json.loads(tfctl(theirs, "queue", "--json", env=bob_env).stdout)
        assert [(t["position"], t["id"]) for t in after["hosts"]["h1"]] == [(1, second["id"])]

        # alice's run ends: bob's starts, after it
        down = tfctl(mine, "down", "--grace", "1")
        assert down.returncode == 0, down.stdout + down.stderr
        ended_at = time.time()
        assert not claim.exists()
        done = wait_until("bob's job started", lambda: _record(
            bob_env, second["id"])["state"] != "waiting" and _record(bob_env, second["id"]), 120)
        assert done["state"] == "started", done
        bob_claim = testbed.claims_dir("h1") / f"{BOB}.run.{done['run_id']}.json"
        assert json.loads(bob_claim.read_text())["since"] >= ended_at - 1
        assert json.loads(bob_claim.read_text())["gpus"] == [0]
        assert not any(testbed.claims_dir("h1").joinpath("queue").glob("*.json"))  # tickets gone
        assert wait_until("bob's waiter ended", lambda: not _alive(second["waiter_pid"]), 30)
    finally:
        for env, queued in ((alice_env, first), (bob_env, second)):
            if queued is not None:
                tfctl(mine if env is alice_env else theirs, "queue", "cancel", queued["id"],
                      env=env)
        tfctl(theirs, "down", "--grace", "1")
        tfctl(mine, "down", "--grace", "1")
        with contextlib.suppress(ProcessLookupError):
            os.kill(carol, signal.SIGKILL)


@needs_users
def test_cancel_stops_the_waiter_and_removes_its_tickets(
    shared_testbed: Testbed, tmp_path: Path
) -> None:
    testbed = shared_testbed
    mine, env = _client(testbed, testbed.users[ALICE], tmp_path / "alice")
    carol = int(testbed.run("h1", f"setpriv --reuid={CAROL} --regid={CAROL} --init-groups bash -c "
                              "'CUDA_VISIBLE_DEVICES=0 setsid sleep 300 </dev/null >/dev/null "
                              "2>&1 & echo $!'").stdout)
    try:
        for args in (["--timeout", "1h"], ["--when-free", "--force"],
                     ["--when-free", "--timeout", "soon"]):
            bad = tfctl(mine, "up", *args, env=env)
            assert bad.returncode == 2 and "Traceback" not in bad.stderr, bad.stderr
        assert not (testbed.claims_dir("h1") / "queue").exists() or not any(
            (testbed.claims_dir("h1") / "queue").glob("*.json"))  # nothing queued by them

        queued = tfctl(mine, "up", "--when-free", "--json", env=env)
        assert queued.returncode == 0, queued.stderr
        ticket = json.loads(queued.stdout)
        files = list((testbed.claims_dir("h1") / "queue").glob("*.json"))
        assert [f.name for f in files] == [f"{ALICE}.ticket.{ticket['id']}.json"]
        assert files[0].stat().st_uid == testbed.users[ALICE].uid
        assert _alive(ticket["waiter_pid"])

        cancelled = tfctl(mine, "queue", "cancel", ticket["id"], "--json", env=env)
        assert cancelled.returncode == 0, cancelled.stderr
        said = json.loads(cancelled.stdout)
        assert (said["was"], said["state"], said["waiter_stopped"]) == (
            "waiting", "cancelled", True)
        assert not _alive(ticket["waiter_pid"]) and not files[0].exists()
        assert _record(env, ticket["id"])["state"] == "cancelled"
        listed = json.loads(tfctl(mine, "queue", "--json", env=env).stdout)
        assert listed["hosts"] == {"h1": []}
        assert [(m["id"], m["state"]) for m in listed["mine"]] == [(ticket["id"], "cancelled")]

        unknown = tfctl(mine, "queue", "cancel", "q-nosuch", env=env)
        assert unknown.returncode == 2 and unknown.stderr.count("\n") == 1, unknown.stderr
        assert "no job q-nosuch was queued from here" in unknown.stderr
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(carol, signal.SIGKILL)


def test_a_start_that_lost_its_gpus_waits_again_through_the_value(
    gpu_testbed: Testbed, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The waiter's loop, in this process (remote/queue/waiter.py), over a real look and a real
    start: between the look that says the job's turn has come and its `up`, another user's
    process takes GPU 0 (the race). The start answers with a lost race (`UpStart.lost`, a
    `GpusBusy`: nothing started), the job waits again in its place while GPU 0 is held, and it
    starts once the GPU is free."""
    from tfctl.remote.connect.transport import SshOptions
    from tfctl.remote.controller import RunController
    from tfctl.remote.errors import GpusBusy
    from tfctl.remote.queue import record as store
    from tfctl.remote.queue.enqueue import Origin
    from tfctl.remote.queue.ids import new_queued_id
    from tfctl.remote.queue.tickets import Want, put
    from tfctl.remote.queue.upstart import UpRequest
    from tfctl.remote.queue.waiter import Looked, Stop, UpWaiting, wait

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    inv_path = gpu_testbed.write_inventory(job_dir(tmp_path) / "cluster.yaml", FOREVER,
                                           hosts=["h1"], gpus={"h1": [0]}, ps={"h1": 0})
    monkeypatch.chdir(inv_path.parent)
    origin = Origin(str(inv_path), None, SshOptions())
    job = origin.job(new_queued_id(), "race", {"h1": Want((0,))}, 600,
                     up_args=UpRequest(sync=True, start_timeout_s=60).to_args())
    job.poll_s = 0.5
    store.write(job)
    with job.fleet() as fleet:
        assert not put(fleet, job.id, job.job, job.wants, job.client).failed
    holders: list[int] = []
    looks: list[Looked] = []

    class Raced(UpWaiting):
        """The job's own look and start; after its first look, someone takes GPU 0; after
        the look that sees them hold it, they let go."""

        def look(self, fleet: Any, say: Any) -> Looked:
            looked = super().look(fleet, say)
            looks.append(looked)
            if len(looks) == 1:
                assert looked.may_start, looked
                holders.append(gpu_testbed.start_on_gpu("h1", 0))
            elif holders and not looked.may_start:
                assert f"pid {holders[0]}" in looked.why, looked.why
                os.kill(holders.pop(), signal.SIGKILL)
            return looked

    said: list[str] = []
    waiting = Raced(job)
    run_id = None
    try:
        state = wait(job, Stop(), said.append, waiting)
        run_id = waiting.run_id
        first, last = waiting.outcomes[0], waiting.outcomes[-1]
        assert isinstance(first.lost, GpusBusy) and first.run_id is None, first
        assert first.error is None
        assert "lost its GPUs to another job just now: waiting again" in said
        assert any(not looked.may_start for looked in looks[1:])  # it waited again
        assert state == "started" and last.run_id is not None and run_id == last.run_id
        ended = store.read(job.id)
        assert ended is not None
        assert (ended.state, ended.run_id) == ("started", run_id)
        (claim,) = gpu_testbed.claims_dir("h1").glob(f"*.run.{run_id}.json")
        assert json.loads(claim.read_text())["gpus"] == [0]
        assert not any(gpu_testbed.claims_dir("h1").joinpath("queue").glob("*.json"))
    finally:
        for pid in holders:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if run_id is not None:
            from tfctl.inventory.load import load_inventory

            with RunController(load_inventory(inv_path)) as controller:
                controller.select_run(run_id, hosts=("h1",))
                controller.down(1.0)
