"""The queue's typed record of a waiting job (remote/queue/record.py): the records earlier
versions wrote still read, and are written back as they were; the ids (remote/queue/ids.py); the
`up` options a record keeps (remote/queue/upstart.py); and why a job may not start, as values
(remote/queue/turn.py)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from tfctl.remote.lab.freegpus import HostFree
from tfctl.remote.queue import ids
from tfctl.remote.queue import record as store
from tfctl.remote.queue.points import place_points
from tfctl.remote.queue.tickets import Ticket, Want
from tfctl.remote.queue.turn import Hold, HostView, host_turn, turns, usable
from tfctl.remote.queue.upstart import UpRequest

# What `tfctl up --when-free` wrote at 09d4925 (tui/cli/queue.py), its waiter having ended.
OLD_UP = {
    "id": "q-20261125-181500-ab12", "inventory": "/home/alice/lab/cluster.yaml",
    "hostfile": None, "cwd": "/home/alice/lab",
    "up_args": ["--no-sync", "--start-timeout", "90", "--only", "h1,h2"], "job": "lab",
    "client": "laptop", "connect_timeout_s": 5.0, "accept_new_host_keys": False,
    "persist_s": 60.0, "wants": {"h1": {"gpus": [0, 1], "count": None},
                                 "h2": {"gpus": None, "count": 2}},
    "queued_at": 1764094500.0, "timeout_s": 43200.0, "poll_s": 10.0, "state": "started",
    "why": "run 20261125-181900-aa11 started", "run_id": "20261125-181900-aa11",
    "log": "/home/alice/.cache/tfctl/queue/q-20261125-181500-ab12.log", "waiter_pid": 4242,
    "updated_at": 1764094740.5, "ended_at": 1764094740.4}

# What `tfctl run --each` wrote at 09d4925 (its sweep record): one point started, one lost its
# GPU and waits, one failed, one cancelled.
_RUN = {"command": "python train.py --seed 1", "name": None, "sweep": "s-20261125-181500-cd34",
        "point": {"seed": "1"}, "index": 0, "points": 4}
OLD_SWEEP = {
    "id": "s-20261125-181500-cd34", "kind": "sweep", "inventory": "/home/alice/lab/cluster.yaml",
    "hostfile": "/home/alice/lab/hosts", "cwd": "/home/alice/lab", "job": "lab: sweep",
    "client": "laptop", "connect_timeout_s": 5.0, "accept_new_host_keys": True,
    "persist_s": 60.0, "wants": {"h1": {"gpus": None, "count": 1}},
    "gpus_each": 1, "queued_at": 1764094500.0, "timeout_s": 600.0, "poll_s": 1.0,
    "state": "waiting", "why": "h1: no free GPU", "run_id": None,
    "log": "/home/alice/.cache/tfctl/queue/s-20261125-181500-cd34.log", "waiter_pid": 4243,
    "updated_at": 1764094510.0,
    "points": [
        {"argv": ["python", "train.py", "--seed", "1"], "values": {"seed": "1"},
         "words": "seed=1", "index": 0, "state": "started", "run_id": "20261125-181501-0a0a",
         "host": "h1", "gpus": [0], "why": None, "run": _RUN, "started_at": 1764094501.0,
         "ended": None},
        {"argv": ["python", "train.py", "--seed", "2"], "values": {"seed": "2"},
         "words": "seed=2", "index": 1, "state": "waiting", "run_id": None, "host": None,
         "gpus": None, "why": "lost h1:1 to another job just now", "run": dict(_RUN, index=1)},
        {"argv": ["python", "train.py", "--seed", "3"], "values": {"seed": "3"},
         "words": "seed=3", "index": 2, "state": "failed", "run_id": None, "host": "h1",
         "gpus": [1], "why": "h1: setup failed", "run": dict(_RUN, index=2)},
        {"argv": ["python", "train.py", "--seed", "4"], "values": {"seed": "4"},
         "words": "seed=4", "index": 3, "state": "cancelled", "run_id": None, "host": None,
         "gpus": None, "why": "cancelled by tfctl down", "run": dict(_RUN, index=3)},
    ]}


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    return tmp_path / "tfctl" / "queue"


@pytest.mark.parametrize("old", [OLD_UP, OLD_SWEEP], ids=["up", "sweep"])
def test_an_old_record_on_disk_reads_and_is_written_back_as_it_was(
        cache: Path, old: dict[str, Any]) -> None:
    cache.mkdir(parents=True)
    (cache / f"{old['id']}.json").write_text(json.dumps(old, indent=1, sort_keys=True))
    job = store.read(old["id"])
    assert job is not None
    assert job.to_json() == old
    assert [j.id for j in store.own_jobs()] == [old["id"]]
    store.write(job)
    again = json.loads((cache / f"{old['id']}.json").read_text())
    assert {k: v for k, v in again.items() if k != "updated_at"} == {
        k: v for k, v in old.items() if k != "updated_at"}
    assert again["updated_at"] > old["updated_at"]


def test_the_typed_record_holds_what_each_kind_needs() -> None:
    up = store.WaitingJob.from_json(OLD_UP)
    assert (up.kind, up.state, up.run_id, up.deadline) == (
        "up", "started", "20261125-181900-aa11", 1764094500.0 + 43200.0)
    assert up.wants == {"h1": Want((0, 1)), "h2": Want(None, 2)}
    assert UpRequest.from_args(up.up_args) == UpRequest(sync=False, start_timeout_s=90.0,
                                                        only=("h1,h2",))
    sweep = store.WaitingJob.from_json(OLD_SWEEP)
    assert (sweep.kind, sweep.gpus_each, sweep.ssh_options().accept_new_host_keys) == (
        "sweep", 1, True)
    assert [p.index for p in sweep.waiting_points()] == [1]
    assert sweep.points[1].point.argv == ("python", "train.py", "--seed", "2")
    assert sweep.points[1].point.values == (("seed", "2"),)
    assert sweep.counts() == "1 started, 1 waiting, 1 failed, 1 cancelled"


def test_a_record_that_does_not_read_is_none_and_ids_never_leave_the_folder(cache: Path) -> None:
    cache.mkdir(parents=True)
    (cache / "q-bad.json").write_text("{not json")
    (cache / "q-partial.json").write_text(json.dumps({"id": "q-partial"}))
    assert store.read("q-bad") is None and store.read("q-partial") is None
    assert store.read("q-nosuch") is None
    assert store.read("../../etc/passwd") is None
    assert store.own_jobs() == []


def test_update_keeps_what_another_process_wrote(cache: Path) -> None:
    job = store.WaitingJob.from_json(OLD_SWEEP)
    store.write(job)
    elsewhere = store.read(job.id)
    assert elsewhere is not None
    elsewhere.points[1].state = "cancelled"
    store.write(elsewhere)
    mine = store.update(job, state="cancelled", why="cancelled")
    assert mine.points[1].state == "cancelled" and mine.state == "cancelled"


# ---------------------------------------------------------------- ids

def test_ids_are_made_and_read_in_one_place() -> None:
    queued, sweep = ids.new_queued_id(), ids.new_sweep_id()
    assert re.fullmatch(r"q-\d{8}-\d{6}-[0-9a-f]{4}", queued)
    assert re.fullmatch(r"s-\d{8}-\d{6}-[0-9a-f]{4}", sweep)
    starting = ids.starting_id(sweep)
    assert starting == "r-" + sweep[2:] and ids.is_starting(starting)
    assert re.fullmatch(r"r-\d{8}-\d{6}-[0-9a-f]{4}", ids.starting_id())
    assert (ids.kind_of(queued), ids.kind_of(sweep)) == ("up", "sweep")
    assert ids.is_sweep(sweep) and not ids.is_sweep(queued) and not ids.is_starting(sweep)
    assert ids.is_record_id(queued) and not ids.is_record_id("q-1/../x")
    assert not ids.is_record_id("")


def test_the_prefixes_are_spelled_only_in_the_ids_module() -> None:
    """No other module of the tree writes an id's prefix as a string."""
    root = Path(__file__).resolve().parents[2]
    spelled = re.compile(r"""["'](?:q|s|r)-["'%{]""")
    found = [str(p.relative_to(root)) for folder in ("inventory", "remote", "tui")
             for p in (root / folder).rglob("*.py")
             if p.name != "ids.py" and spelled.search(p.read_text())]
    assert found == []


def test_up_options_round_trip_as_tfctl_up_takes_them() -> None:
    request = UpRequest(sync=False, start_timeout_s=30.0, force_setup=True, ps_first=True,
                        only=("h1", "h2"), exclude=("h3",))
    assert UpRequest.from_args(request.to_args()) == request
    assert UpRequest().to_args() == ["--start-timeout", "180"]
    with pytest.raises(ValueError, match="--force"):
        UpRequest.from_args(["--force"])


# ---------------------------------------------------------------- why not, as values

def _t(ident: str, user: str, uid: int, queued: float, want: Want,
       state: str = "waiting") -> Ticket:
    return Ticket("h1", ident, user, uid, want, queued, queued, state)


FREE = HostFree("h1", (0, 1, 2, 3))
BUSY0 = HostFree("h1", (1, 2, 3), ("GPU 0: held by carol (pid 42 sleep 300)",), (0,))


def test_each_reason_is_a_value_with_what_it_names() -> None:
    mine = _t("q-a", "alice", 1, 2.0, Want((0,)))
    bob = _t("q-b", "bob", 2, 1.0, Want((0,)))
    cases = {
        Hold.NO_TICKET: host_turn(HostView("h1", FREE, (bob,), 1), "q-a", Want((0,))),
        Hold.QUEUED_FIRST: host_turn(HostView("h1", FREE, (mine, bob), 1), "q-a", Want((0,))),
        Hold.GPUS_TAKEN: host_turn(HostView("h1", BUSY0, (mine,), 1), "q-a", Want((0,))),
        Hold.TOO_FEW: host_turn(HostView("h1", BUSY0, (mine,), 1), "q-a", Want(None, 4)),
        Hold.CANNOT_READ: host_turn(HostView("h1", HostFree("h1", error="cannot look: down"),
                                             unreachable="down"), "q-a", Want((0,))),
    }
    for hold, turn in cases.items():
        assert turn.reason is not None and turn.reason.hold is hold and not turn.ready
    assert cases[Hold.QUEUED_FIRST].ahead == (bob,)
    assert cases[Hold.GPUS_TAKEN].reason.taken == ("GPU 0: held by carol (pid 42 sleep 300)",)
    assert (cases[Hold.TOO_FEW].reason.free_count, cases[Hold.TOO_FEW].reason.wanted) == (3, 4)
    assert cases[Hold.CANNOT_READ].why == "cannot look: down"
    # the same value, its words where each says them
    assert cases[Hold.NO_TICKET].why == "its ticket is not there"
    assert cases[Hold.NO_TICKET].reason.words("our") == "our ticket is not there"
    ready = host_turn(HostView("h1", FREE, (mine,), 1), "q-a", Want((0,)))
    assert ready.ready and ready.reason is None and ready.why == "free"


def test_a_waiter_finds_a_lost_ticket_by_its_kind() -> None:
    """The hosts whose ticket is gone are found by `Hold.NO_TICKET`, for an `up` job's turns
    and a sweep's placement alike: that is what the waiters act on."""
    mine = _t("s-a", "alice", 1, 2.0, Want(None, 1))
    views = [HostView("h1", FREE, (mine,), 1), HostView("h2", FREE, (), 1)]
    found = turns(views, "s-a", {"h1": Want(None, 1), "h2": Want(None, 1)})
    assert found.held_by(Hold.NO_TICKET) == ["h2"] and not found.ready
    placed = place_points(1, 8, "s-a", views, {"h1": None, "h2": None})
    assert placed.held_by(Hold.NO_TICKET) == ["h2"]
    assert placed.why["h2"] == "our ticket is not there"
    free, reason = usable(views[0], "s-a", (0, 1))
    assert (free, reason) == ([0, 1], None)
