"""The lab policy's fair queue and GPUs per user, on the lab shared by real Unix users
(tests/support/testbed/users.py): alice and bob each queue `tfctl run --when-free` from their
own login and client, carol holds GPUs by hand (`sleep` with a mask, which the stand-in
nvidia-smi sees on its GPU), and root writes each host's policy file (its TFCTL_LAB_POLICY).

Recent use is each host's GPU ledger's (remote/agent/ledger.py, read by recentuse.py);
"alice's use of yesterday" is planted there as her own run's ledger file, a file she owns, as
the run's watcher writes it.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.testbed.testbed import Testbed
from tests.support.testbed.users import ALICE, BOB, CAROL, LabUser, can_add_users
from tests.support.testbedtools import tfctl, user_inventory, wait_until

pytestmark = pytest.mark.skipif(not can_add_users(), reason="other Unix users need root")

SCRIPT = "import sys, time\ntime.sleep(float(sys.argv[1]))\n"
"""A script that sleeps SECONDS (its first argument): holds its GPU that long."""
HOUR = 3600.0


@pytest.fixture
def lab_policy(shared_testbed: Testbed) -> Iterator[Callable[[str, str], None]]:
    """`place(host, text)`: the host's policy file as its administrator (root) writes it;
    removed after the test."""
    placed: list[Path] = []

    def place(host: str, text: str) -> None:
        path = shared_testbed.policy_file(host)
        for folder in (path.parent.parent, path.parent):
            folder.mkdir(mode=0o755, exist_ok=True)
        path.write_text(text)
        path.chmod(0o644)
        os.chown(path, 0, 0)
        placed.append(path)

    yield place
    for path in placed:
        path.unlink(missing_ok=True)


def _client(testbed: Testbed, user: LabUser, folder: Path, gpus: dict[str, list[int]]
            ) -> tuple[Path, dict[str, str]]:
    inv = user_inventory(testbed, user, folder, hosts=sorted(gpus), gpus=gpus,
                         ps={h: 0 for h in gpus}, name=f"lab-{user.name}")
    (inv.parent / "hold.py").write_text(SCRIPT)
    return inv, {"XDG_CACHE_HOME": str(folder / "cache"), "TFCTL_QUEUE_POLL_S": "1"}


def _hold(testbed: Testbed, host: str, gpu: int) -> int:
    """carol's process on the host's GPU `gpu`, by hand; its pid."""
    return int(testbed.run(host, f"setpriv --reuid={CAROL} --regid={CAROL} --init-groups bash "
                                 f"-c 'CUDA_VISIBLE_DEVICES={gpu} setsid sleep 300 </dev/null "
                                 ">/dev/null 2>&1 & echo $!'").stdout)


def _plant_use(testbed: Testbed, host: str, user: LabUser, gpu_s: float, ended: float) -> Path:
    """A finished run's GPU time in the host's ledger (remote/agent/ledger.py), `gpu_s`
    seconds of one GPU in the hours up to `ended`, as its watcher writes it: a file `user`
    owns."""
    folder = testbed.claims_dir(host) / "ledger"
    for needed in (folder.parent, folder):
        if not needed.exists():
            needed.mkdir()
            needed.chmod(0o1777)
    hours, left, hour = {}, gpu_s, int(ended // 3600)
    while left > 0:
        hours[str(hour)] = [min(left, 3600.0), 0.0, 0.0, 0.0]
        left, hour = left - 3600.0, hour - 1
    path = folder / f"{user.name}.run.planted-{int(ended)}.json"
    path.write_text(json.dumps({"format": "tfctl-ledger/1", "kind": "run", "user": user.name,
                                "run_id": f"planted-{int(ended)}", "job": "yesterday's",
                                "gpus": {"GPU-0": {"index": 0, "uuid": "GPU-0", "name": "x",
                                                   "hours": hours}}}))
    os.chown(path, user.uid, user.gid)
    path.chmod(0o644)
    return path


def _queued(inv: Path, env: dict[str, str], *args: str) -> dict[str, Any]:
    done = tfctl(inv, "run", "--when-free", "--json", *args, "--", "python", "hold.py", "300",
                 env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    said = dict(json.loads(done.stdout))
    assert [p["state"] for p in said["points"]] == ["waiting"], said
    return said


def _record(env: dict[str, str], sweep: str) -> dict[str, Any]:
    return dict(json.loads((Path(env["XDG_CACHE_HOME"]) / "tfctl" / "queue"
                            / f"{sweep}.json").read_text()))


def _run_claims(testbed: Testbed, host: str) -> list[str]:
    """The owners of the host's run claims."""
    return sorted(p.name.split(".")[0] for p in testbed.claims_dir(host).glob("*.run.*.json"))


def _stop(clients: list[tuple[Path, dict[str, str], dict[str, Any] | None]]) -> None:
    for inv, env, queued in clients:
        if queued is not None:
            tfctl(inv, "queue", "cancel", queued["sweep"], env=env)
            tfctl(inv, "down", "--run", queued["sweep"], "--grace", "1", env=env)


@pytest.mark.parametrize("order, first", [("fair", BOB), ("fifo", ALICE)])
def test_fair_order_starts_the_user_with_less_recent_use_first(
        shared_testbed: Testbed, lab_policy: Callable[[str, str], None], tmp_path: Path,
        order: str, first: str) -> None:
    testbed = shared_testbed
    alice, bob = testbed.users[ALICE], testbed.users[BOB]
    lab_policy("h1", f"queue: {{order: {order}, half_life: 3d}}\n")
    yesterday = time.time() - 86400
    planted = [_plant_use(testbed, "h1", alice, 8 * HOUR, yesterday),
               _plant_use(testbed, "h1", bob, 0.1 * HOUR, yesterday)]
    mine, alice_env = _client(testbed, alice, tmp_path / "alice", {"h1": [0]})
    theirs, bob_env = _client(testbed, bob, tmp_path / "bob", {"h1": [0]})
    carol = _hold(testbed, "h1", 0)  # the lab is full
    queued: list[tuple[Path, dict[str, str], dict[str, Any] | None]] = []
    try:
        queued.append((mine, alice_env, _queued(mine, alice_env)))
        queued.append((theirs, bob_env, _queued(theirs, bob_env)))
        ids = {ALICE: queued[0][2]["sweep"], BOB: queued[1][2]["sweep"]}  # type: ignore[index]
        listed = json.loads(tfctl(theirs, "queue", "--json", env=bob_env).stdout)
        line = [(t["position"], t["user"], t["id"]) for t in listed["hosts"]["h1"]]
        second = ALICE if first == BOB else BOB
        assert line == [(1, first, ids[first]), (2, second, ids[second])], listed
        shown = tfctl(theirs, "queue", env=bob_env).stdout
        if order == "fair":  # each place and why: the user's share of the recent use, a day
            # ago at a half-life of 3 days counting about 2 ** (-1/3) = 0.79 of the hours
            assert f"(fair: {BOB} used 0.08 GPU-h recently, 1 % of the recent use here)" \
                in shown, shown
            assert f"(fair: {ALICE} used 6." in shown and "99 % of the recent use here" \
                in shown, shown
        assert _run_claims(testbed, "h1") == []

        os.kill(carol, signal.SIGKILL)  # a GPU frees
        owners = wait_until("a queued job started", lambda: _run_claims(testbed, "h1"), 120)
        assert owners == [first]
        time.sleep(3)  # the other one's waiter looks again a few times: it still waits
        assert _run_claims(testbed, "h1") == [first]
        later = alice_env if second == ALICE else bob_env
        assert _record(later, ids[second])["state"] == "waiting"
    finally:
        _stop(queued)
        with contextlib.suppress(ProcessLookupError):
            os.kill(carol, signal.SIGKILL)
        for path in planted:
            path.unlink(missing_ok=True)


def test_a_user_at_the_limit_waits_while_another_users_job_waits(
        shared_testbed: Testbed, lab_policy: Callable[[str, str], None],
        tmp_path: Path) -> None:
    """gpus_per_user: 2 on both hosts. alice holds 2 GPUs on h1; on h2, full (carol), alice
    queues a third, then bob queues one: the limit counts alice's h1 GPUs on h2, so her
    `run` there is refused in one sentence, and when an h2 GPU frees, bob's job (queued after
    hers) takes it."""
    testbed = shared_testbed
    alice, bob = testbed.users[ALICE], testbed.users[BOB]
    for host in ("h1", "h2"):
        lab_policy(host, "limits: {gpus_per_user: 2}\n")
    gpus = {"h1": [0, 1], "h2": [0, 1]}
    mine, alice_env = _client(testbed, alice, tmp_path / "alice", gpus)
    theirs, bob_env = _client(testbed, bob, tmp_path / "bob", gpus)
    carol = [_hold(testbed, "h2", 0), _hold(testbed, "h2", 1)]
    queued: list[tuple[Path, dict[str, str], dict[str, Any] | None]] = []
    running = None
    try:
        started = tfctl(mine, "run", "--gpus", "2", "--host", "h1", "--json", "--", "python",
                        "hold.py", "300", env=alice_env)
        assert started.returncode == 0, started.stdout + started.stderr
        running = json.loads(started.stdout)["run_id"]
        queued.append((mine, alice_env, _queued(mine, alice_env, "--host", "h2")))
        queued.append((theirs, bob_env, _queued(theirs, bob_env, "--host", "h2")))
        bob_sweep = queued[1][2]["sweep"]  # type: ignore[index]

        refused = tfctl(mine, "run", "--host", "h2", "--", "python", "hold.py", "1",
                        env=alice_env)
        assert refused.returncode != 0
        errors = [line for line in refused.stderr.splitlines() if line.startswith("error:")]
        assert errors == [  # one sentence: the limit, and alice's GPUs over both hosts
            f"error: the lab's limit is 2 GPUs per user and {ALICE} holds 2: 1 more must wait "
            f"while {BOB}'s {bob_sweep} waits (`tfctl run --when-free` waits for its turn)"
        ], refused.stderr
        assert "Traceback" not in refused.stderr
        alice_sweep = queued[0][2]["sweep"]  # type: ignore[index]
        # her queued one, older than bob's, stands aside and says why
        said = wait_until("alice's queued job names the limit", lambda: "the lab's limit is 2 "
                          f"GPUs per user and {ALICE} holds 2" in (_record(
                              alice_env, alice_sweep)["why"] or ""), 60)
        assert said

        os.kill(carol[1], signal.SIGKILL)  # h2's GPU 1 frees
        owners = wait_until("a queued job started on h2",
                            lambda: _run_claims(testbed, "h2"), 120)
        assert owners == [BOB]
        time.sleep(3)
        assert _run_claims(testbed, "h2") == [BOB]
        assert _record(alice_env, alice_sweep)["state"] == "waiting"
    finally:
        _stop(queued)
        if running:
            tfctl(mine, "down", "--run", running, "--grace", "1", env=alice_env)
        for pid in carol:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def test_reserve_keeps_to_the_longest_reservation_and_the_limit_over_hosts(
        shared_testbed: Testbed, lab_policy: Callable[[str, str], None],
        tmp_path: Path) -> None:
    testbed = shared_testbed
    alice = testbed.users[ALICE]
    for host in ("h1", "h2"):
        lab_policy(host, "limits: {gpus_per_user: 1, max_reserve: 8h, "
                         "exceed_when_nobody_waits: false}\n")
    mine, env = _client(testbed, alice, tmp_path / "alice", {"h1": [0, 1], "h2": [0, 1]})
    try:
        too_long = tfctl(mine, "reserve", "h1:0", "--for", "1d", env=env)
        assert too_long.returncode != 0
        assert "the lab's policy lets a reservation last at most 8h, not 1d" in too_long.stderr
        both = tfctl(mine, "reserve", "h1:0", "h2:0", "--for", "1h", env=env)
        assert both.returncode != 0  # 2 GPUs over the two hosts: all or nothing
        assert f"the lab's limit is 1 GPU per user and {ALICE} holds 1: 1 more must wait" \
            in both.stderr, both.stderr
        assert not list(testbed.claims_dir("h1").glob("*.reservation.*")) + list(
            testbed.claims_dir("h2").glob("*.reservation.*"))
        one = tfctl(mine, "reserve", "h1:0", "--for", "1h", env=env)
        assert one.returncode == 0, one.stdout + one.stderr
        other = tfctl(mine, "reserve", "h2:1", "--for", "1h", env=env)  # counts h1's
        assert other.returncode != 0
        assert [line for line in other.stderr.splitlines() if line.startswith("error:")] == [
            f"error: h2: the lab's limit is 1 GPU per user and {ALICE} holds 1: 1 more must "
            "wait"], other.stderr
    finally:
        tfctl(mine, "release", "h1:0", "h2:0", env=env)
