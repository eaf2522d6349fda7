"""A lab shared by several Unix users, on the lab: claims, `tfctl lab`, reservations, refusals.

Three real accounts (tests/support/testbed/users.py) log in to the same lab hosts with their own
keys and inventories, through the system Python; the stand-in nvidia-smi sees every user's processes
with their real pids, as a driver does. alice runs a job, bob looks and reserves, carol holds a GPU
by hand (a process with a mask, declaring 0 % utilization: a forgotten notebook). bob's dashboard
shows the same in its lab view (`L`), in a real terminal (tmux).
"""

from __future__ import annotations

import json
import os
import pwd
import shlex
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.support.testbed.client import tfctl_as, user_home
from tests.support.testbed.inventory import dump_inventory
from tests.support.testbed.testbed import Testbed
from tests.support.testbed.users import ALICE, BOB, CAROL, SYSTEM_PYTHON, LabUser, can_add_users
from tests.support.testbedtools import FOREVER, job_dir, run_id_from, tfctl, user_inventory
from tests.support.tmuxpane import Pane
from tfctl.remote.lab.claims import clock
from tfctl.remote.runs.current import state_file

pytestmark = pytest.mark.skipif(not can_add_users(), reason="other Unix users need root")
def _lab_json(inv: Path, *args: str) -> list[dict[str, Any]]:
    done = tfctl(inv, "lab", "--json", *args)
    assert done.returncode == 0, done.stdout + done.stderr
    return list(json.loads(done.stdout))


WIDE = {"COLUMNS": "200"}  # the table's rows unwrapped


def _row(rows: list[dict[str, Any]], host: str, gpu: int) -> dict[str, Any]:
    return next(r for r in rows if r["host"] == host and r["gpu"] == gpu)


def _as_user(
    testbed: Testbed, host: str, user: str, command: str
) -> subprocess.CompletedProcess[str]:
    """`command` run by `user` inside the host (setpriv: that user's uid, gid and groups)."""
    return testbed.run(host, f"setpriv --reuid={user} --regid={user} --init-groups "
                         f"bash -c {shlex.quote(command)}", check=False)


def _kill_run(claim: Path) -> None:
    """SIGKILL every process a run's claim records: the run dies without a word."""
    record = json.loads(claim.read_text())
    pids = [record.get("watcher_pid")] + [p for t in record["tasks"]
                                          for p in (t.get("supervisor_pid"), t.get("pid"))]
    for pid in (p for p in pids if p):
        try:
            os.kill(int(pid), signal.SIGKILL)
        except ProcessLookupError:
            continue


def _wanting_h1_gpu0(testbed: Testbed, user: str, folder: Path, **kwargs: Any) -> Path:
    """`user`'s inventory of the light job in `folder`, its worker on h1's GPU 0: the GPU the
    users' runs and reservations contend for (`kwargs` as user_inventory takes them; the
    hosts: h1 alone unless given)."""
    return user_inventory(testbed, testbed.users[user], folder, gpus={"h1": [0]},
                          **{"hosts": ["h1"], **kwargs})


def test_two_users_see_each_other_reserve_and_refuse(
    shared_testbed: Testbed, tmp_path: Path
) -> None:
    testbed = shared_testbed
    alice = testbed.users[ALICE]
    mine = _wanting_h1_gpu0(testbed, ALICE, tmp_path / "alice", ps={"h1": 1})
    second = user_inventory(testbed, alice, tmp_path / "alice2", hosts=["h1"], gpus={"h1": [1]},
                        ps={"h1": 0}, name="lab2")
    theirs = _wanting_h1_gpu0(testbed, BOB, tmp_path / "bob", hosts=["h1", "h2"],
                              ps={"h1": 0, "h2": 0}, name="bobs")
    carol_pid = None
    try:
        up = tfctl(mine, "up")
        assert up.returncode == 0, up.stdout + up.stderr
        run_id = run_id_from(up.stdout)
        claim = testbed.claims_dir("h1") / f"{ALICE}.run.{run_id}.json"
        assert claim.exists() and claim.stat().st_uid == alice.uid
        assert oct(testbed.claims_dir("h1").stat().st_mode)[-4:] == "1777"

        # bob sees alice's run as alice's run, not as a foreign pid
        rows = _lab_json(theirs)
        held = _row(rows, "h1", 0)
        assert held["state"] == "held", held
        assert [(h["kind"], h["user"], h["run_id"], h["job"], h["task"])
                for h in held["holders"]] == [("run", ALICE, run_id, "lab", "worker:0")]
        assert _row(rows, "h1", 1)["state"] == "free"
        assert {r["state"] for r in rows if r["host"] == "h2"} == {"free"}
        table = tfctl(theirs, "lab", env=WIDE)
        assert table.returncode == 0 and f"run {run_id} (job lab) worker:0" in table.stdout
        if shutil.which("tmux") is not None:  # the dashboard's lab view, in a real terminal
            pane = Pane(f"{sys.executable} -m tfctl.tui -i {theirs} ui", name="tfctl-lab")
            try:
                pane.wait("the dashboard", lambda screen: "h1" in screen, timeout_s=90)
                pane.keys("L")
                pane.wait("alice's run in bob's lab view",
                          lambda screen: f"run {run_id} (job lab) worker:0" in screen
                          and ALICE in screen, timeout_s=60)
            finally:
                pane.close()

        # bob's `up` onto alice's GPU is refused naming her run
        refused = tfctl(theirs, "up")
        assert refused.returncode == 1, refused.stdout + refused.stderr
        assert f"(user {ALICE}, 1500 MiB" in refused.stderr
        assert f"; tfctl run {run_id} worker:0" in refused.stderr

        # bob reserves h1:1; alice's up on GPU 1 is refused, naming bob and the end time
        reserved = tfctl(theirs, "reserve", "h1:1", "--for", "2h", "--note", "ICML runs",
                         "--json")
        assert reserved.returncode == 0, reserved.stdout + reserved.stderr
        until = json.loads(reserved.stdout)[0]["until"]
        listed = tfctl(mine, "reserve", "--list", "--json")
        assert [(r["host"], r["gpus"], r["user"], r["note"]) for r in json.loads(
            listed.stdout)] == [("h1", [1], BOB, "ICML runs")]
        blocked = tfctl(second, "up")
        assert blocked.returncode == 1, blocked.stdout + blocked.stderr
        assert (f"h1: GPU 1: reserved by {BOB} until {clock(until)} (ICML runs)"
                in blocked.stderr), blocked.stderr
        assert "nothing was started" in blocked.stderr
        checked = tfctl(second, "check")
        assert checked.returncode == 1
        assert (f"h1: GPU 1: reserved by {BOB} until {clock(until)} (ICML runs): a GPU the plan "
                "assigns") in checked.stdout, checked.stdout
        assert _row(_lab_json(mine), "h1", 1)["reservation"]["user"] == BOB
        # bob's own reservation is his to use: his up is not refused for it
        refused = tfctl(theirs, "reserve", "h1:1", "--for", "1h")  # his own: replaced
        assert refused.returncode == 0, refused.stderr

        # bob cannot remove alice's claim, by tfctl or by hand
        denied = _as_user(testbed, "h1", BOB, f"rm -f {claim}")
        assert denied.returncode != 0 and "Operation not permitted" in denied.stderr
        assert claim.exists()
        by_alice = tfctl(mine, "release", "h1:1")
        assert by_alice.returncode == 1
        assert f"GPU 1 is reserved by {BOB}, not you" in by_alice.stderr

        # carol holds h2:0 by hand at 0 %: shown with her user and pid, idle once measured
        carol_pid = int(_as_user(testbed, "h2", CAROL, "CUDA_VISIBLE_DEVICES=0 "
                                 "TFCTL_TEST_GPU_UTIL=0 setsid sleep 300 </dev/null "
                                 ">/dev/null 2>&1 & echo $!").stdout)
        first = _row(_lab_json(theirs, "--idle-after", "4s"), "h2", 0)
        assert [(h["kind"], h["user"], h["pid"], h["command"]) for h in first["holders"]] == [
            ("process", CAROL, carol_pid, "sleep 300")]
        assert first["holders"][0]["idle"] is False  # not measured long enough yet
        deadline = time.monotonic() + 60
        while True:
            later = _row(_lab_json(theirs, "--idle-after", "4s"), "h2", 0)["holders"][0]
            if later["idle"] or time.monotonic() > deadline:
                break
            time.sleep(1)
        assert later["idle"] is True and later["low_util_s"] >= 4, later
        shown = tfctl(theirs, "lab", "--idle-after", "4s", env=WIDE)
        assert f"pid {carol_pid} sleep 300" in shown.stdout and "idle " in shown.stdout

        # a run killed without a word leaves a stale claim: shown so, never obeyed
        _kill_run(claim)
        after = _row(_lab_json(theirs), "h1", 0)
        assert after["state"] == "free" and [(c["user"], c["run_id"], c["state"]) for c in
                                             after["stale_claims"]] == [(ALICE, run_id,
                                                                         "stale")]
        assert "stale claim" in tfctl(theirs, "lab", env=WIDE).stdout
        assert claim.exists()  # bob's look removed nothing of alice's
        tfctl(mine, "lab")  # alice's own next command removes her stale claim
        assert not claim.exists()
    finally:
        if carol_pid:
            os.kill(carol_pid, signal.SIGKILL)
        tfctl(theirs, "release", "h1:1")
        tfctl(mine, "down", "--grace", "1")


def test_a_claim_goes_with_its_run(testbed: Testbed, tmp_path: Path) -> None:
    """The run's watcher removes its claim on each host when the job ends by itself, and `down`
    when it is stopped; while it runs the claim names its tasks with their pids."""
    finite = {"script": "job.py", "style": "flags", "args": ["--steps=3"]}
    for folder in ("a", "b"):
        (tmp_path / folder).mkdir()
    inv = testbed.write_inventory(job_dir(tmp_path / "a") / "cluster.yaml", finite,
                              hosts=["h1", "h2"])
    forever = testbed.write_inventory(job_dir(tmp_path / "b") / "cluster.yaml", FOREVER,
                                  hosts=["h1", "h2"], name="forever")
    try:
        # h2 takes worker:0 (on h1) for ended 3 s after its port closed (20 s by default).
        up = tfctl(inv, "up", env={"TFCTL_CLOSED_FOR_GOOD_S": "3"})
        assert up.returncode == 0, up.stdout + up.stderr
        run_id = run_id_from(up.stdout)
        claims = [testbed.claims_dir(h) / f"{testbed.user}.run.{run_id}.json" for h in ("h1", "h2")]
        deadline = time.monotonic() + 90
        while any(c.exists() for c in claims):  # no tfctl command in between
            assert time.monotonic() < deadline, [c for c in claims if c.exists()]
            time.sleep(0.5)
        up = tfctl(forever, "up")
        assert up.returncode == 0, up.stdout + up.stderr
        run_id = run_id_from(up.stdout)
        claims = [testbed.claims_dir(h) / f"{testbed.user}.run.{run_id}.json" for h in ("h1", "h2")]
        record = json.loads(claims[0].read_text())
        assert record["run_id"] == run_id and record["job"] == "forever"
        assert {t["name"] for t in record["tasks"]} == {"ps:0", "worker:0"}
        assert all(t["pid"] and t["start_ticks"] for t in record["tasks"])
        down = tfctl(forever, "down", "--grace", "1")
        assert down.returncode == 0, down.stdout + down.stderr
        assert not any(c.exists() for c in claims)
    finally:
        tfctl(forever, "down", "--grace", "1")
        tfctl(inv, "down", "--grace", "1")


def test_one_read_only_inventory_serves_each_user_their_own_run(
        shared_testbed: Testbed, tmp_path: Path) -> None:
    """A lab's one cluster.yaml in a folder every user reads and none may write: root and bob,
    each on their own account and key (`~/.ssh` of their home), `up`, `status` and `down`
    their own run; what tfctl remembers is in each one's `~/.local/state/tfctl`; a state file
    an older tfctl of root's left beside the inventory is not bob's."""
    testbed = shared_testbed
    bob = testbed.users[BOB]
    root = LabUser("root", 0, 0, testbed.key, {})
    tag = uuid.uuid4().hex[:8]
    shared = testbed.dir / f"shared-{tag}" / "lab"
    shared.parent.mkdir()
    job_dir(shared.parent).rename(shared)  # the light job's job.py
    homes = testbed.dir / f"homes-{tag}"
    homes.mkdir()
    homes.chmod(0o711)
    home = {u.name: user_home(homes / u.name, u, u.key) for u in (root, bob)}
    data = testbed.inventory_dict(FOREVER, hosts=["h1"], ps={"h1": 0}, python=SYSTEM_PYTHON,
                                  identity_file="~/.ssh/id_ed25519")
    del data["defaults"]["user"]  # each user logs in as themselves
    data["hosts"][0]["workdir"] = f"~/tfctl-shared-{tag}"
    inv = dump_inventory(data, shared / "cluster.yaml")
    for folder in (shared.parent, shared):
        folder.chmod(0o755)
    bobs_workdir = Path(pwd.getpwnam(BOB).pw_dir) / f"tfctl-shared-{tag}"

    def as_(user: LabUser, *args: str) -> subprocess.CompletedProcess[str]:
        done = tfctl_as(user, home[user.name], inv, *args)
        assert "Traceback" not in done.stderr, done.stderr
        return done

    def status(user: LabUser) -> dict[str, Any]:
        done = as_(user, "status", "--json")
        assert done.returncode == 0, done.stdout + done.stderr
        return dict(json.loads(done.stdout))

    try:
        up = as_(root, "up")
        assert up.returncode == 0, up.stdout + up.stderr
        roots = run_id_from(up.stdout)
        (shared / ".tfctl-state-lab.json").write_text(json.dumps({"run_id": roots}))
        assert "no run yet" in as_(bob, "status").stdout  # root's file is not bob's
        up = as_(bob, "up")
        assert up.returncode == 0, up.stdout + up.stderr
        bobs = run_id_from(up.stdout)
        assert bobs != roots
        mine = status(bob)
        assert (mine["run_id"], mine["source"]) == (bobs, "state file")
        assert [(t["name"], t["state"]) for t in mine["tasks"]] == [("worker:0", "running")]
        assert status(root)["run_id"] == roots
        assert [p.name for p in (home[BOB] / ".local" / "state" / "tfctl").iterdir()] == [
            Path(state_file(str(inv), "lab")).name]
        down = as_(bob, "down", "--grace", "1")
        assert down.returncode == 0 and f"run {bobs}: stopped worker:0" in down.stdout, down
        theirs = status(root)
        assert theirs["run_id"] == roots and theirs["tasks"][0]["state"] == "running"
        assert sorted(p.name for p in shared.iterdir()) == [".tfctl-state-lab.json",
                                                            "cluster.yaml", "job.py"]
    finally:
        tfctl_as(bob, home[BOB], inv, "down", "--grace", "1")
        tfctl_as(root, home["root"], inv, "down", "--grace", "1")
        shutil.rmtree(bobs_workdir, ignore_errors=True)
        shutil.rmtree(shared.parent, ignore_errors=True)
        shutil.rmtree(homes, ignore_errors=True)


def test_a_flood_of_junk_claims_hides_no_reservation(shared_testbed: Testbed,
                                                     tmp_path: Path) -> None:
    """bob fills h1's claims folder with 1500 junk files: alice's reservation of h1:0 still
    shows in her `lab` and in his, his `up` onto it is refused naming her, and what was skipped
    is one line, bob's (docs/claims.md: No user's files hide another's)."""
    testbed = shared_testbed
    mine = _wanting_h1_gpu0(testbed, ALICE, tmp_path / "alice", ps={"h1": 0})
    theirs = _wanting_h1_gpu0(testbed, BOB, tmp_path / "bob", ps={"h1": 0}, name="bobs")
    folder = testbed.claims_dir("h1")
    try:
        reserved = tfctl(mine, "reserve", "h1:0", "--for", "1h", "--note", "thesis")
        assert reserved.returncode == 0, reserved.stdout + reserved.stderr
        flood = _as_user(testbed, "h1", BOB, f"cd {folder} && for i in $(seq 0 1499); do "
                         f"echo '{{}}' > {BOB}.run.junk$i.json; done")
        assert flood.returncode == 0, flood.stderr
        for inv in (mine, theirs):
            done = tfctl(inv, "lab", "--json")
            assert done.returncode == 0, done.stdout + done.stderr
            row = _row(json.loads(done.stdout), "h1", 0)
            assert row["state"] == "reserved" and row["reservation"]["user"] == ALICE, row
            skipped = [line for line in done.stderr.splitlines() if "skipped" in line]
            assert len(skipped) == 1 and f"skipped 1500 files of user {BOB}" in skipped[0], \
                done.stderr
        refused = tfctl(theirs, "up")
        assert refused.returncode == 1, refused.stdout + refused.stderr
        assert f"h1: GPU 0: reserved by {ALICE} until" in refused.stderr, refused.stderr
        assert "nothing was started" in refused.stderr
        assert len([line for line in refused.stderr.splitlines() if "skipped" in line]) <= 1
    finally:
        _as_user(testbed, "h1", BOB, f"rm -f {folder}/{BOB}.run.junk*.json")
        tfctl(mine, "release", "h1:0")
