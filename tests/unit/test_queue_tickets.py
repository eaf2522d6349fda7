"""Queue tickets (remote/agent/tickets.py) on this machine's real filesystem, other users'
files read without trusting them, and whose turn it is (remote/queue/turn.py), table-tested."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tfctl.remote.agent import tickets
from tfctl.remote.agent.proc import user_name
from tfctl.remote.agent.vocab import GpuStateRequest, TicketDropAnswer, TicketRequest
from tfctl.remote.lab.freegpus import HostFree
from tfctl.remote.queue.tickets import Ticket, Want, ticket_of
from tfctl.remote.queue.turn import HostView, host_turn

ME = user_name(os.getuid()) or str(os.getuid())
NOBODY = 65534
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="chown needs root")


@pytest.fixture
def folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setenv("TFCTL_CLAIMS_DIR", str(tmp_path / "claims"))
    yield tmp_path / "claims" / "queue"


def _body(**extra: object) -> dict[str, object]:
    return dict({"format": tickets.TICKET_FORMAT, "id": "q-1", "job": "lab", "gpus": [0],
                 "count": None, "queued": 1.0, "beat": time.time()}, **extra)


@pytest.mark.parametrize("raw, error", [
    ([], "not a tfctl-ticket/1 record"),
    (_body(id=""), "no ticket id"),
    (_body(gpus=[-1]), "gpus is not a list of GPU indices"),
    (_body(gpus=[True]), "gpus is not a list of GPU indices"),
    (_body(gpus=None, count=None), "wants no GPUs"),
    (_body(count=99, gpus=None), "count is not a GPU count"),
    (_body(queued="soon"), "no time stamps"),
])
def test_a_record_that_is_no_ticket_is_refused(raw: object, error: str) -> None:
    with pytest.raises(ValueError, match=error):
        tickets.parse_ticket(raw)


def test_put_keeps_its_place_and_drop_removes_only_ours(folder: Path) -> None:
    first = tickets.op_ticket_put(TicketRequest("q-1", "lab", (0,)))
    assert oct(folder.stat().st_mode)[-4:] == "1777"
    again = tickets.op_ticket_put(TicketRequest("q-1", "lab", (0,)))
    assert again.queued == first.queued  # refreshed, not queued anew
    found, warnings = tickets.read_tickets(time.time())
    assert warnings == [] and [(t["id"], t["user"], t["gpus"], t["state"]) for t in found] == [
        ("q-1", ME, [0], "waiting")]
    assert tickets.op_ticket_drop(TicketRequest("q-1")) == TicketDropAnswer(dropped=True)
    assert tickets.op_ticket_drop(TicketRequest("q-1")) == TicketDropAnswer(dropped=False)


def test_a_ticket_whose_waiter_stopped_looking_is_stale(folder: Path) -> None:
    tickets.op_ticket_put(TicketRequest("q-1", count=2))
    found, _ = tickets.read_tickets(time.time() + tickets.TICKET_STALE_S + 1)
    assert [t["state"] for t in found] == ["stale"]
    tickets.op_gpu_state(GpuStateRequest(beat="q-1"))  # a look refreshes it
    assert [t["state"] for t in tickets.read_tickets(time.time())[0]] == ["waiting"]


def test_hostile_files_are_skipped_with_one_warning_for_their_owner(folder: Path,
                                                                   tmp_path: Path) -> None:
    tickets.op_ticket_put(TicketRequest("q-ok", gpus=(1,)))
    secret = tmp_path / "secret.json"
    secret.write_text(json.dumps(_body(id="q-secret")))
    (folder / f"{ME}.ticket.link.json").symlink_to(secret)
    (folder / f"{ME}.ticket.bad.json").write_text("{not json")
    (folder / f"{ME}.ticket.huge.json").write_text(" " * (tickets.TICKET_MAX_BYTES + 1))
    (folder / f"{ME}.ticket.shape.json").write_text(json.dumps(_body(gpus="all")))
    (folder / "README").write_text("not a ticket's name: not read, not warned about")
    found, warnings = tickets.read_tickets(time.time())
    assert [t["id"] for t in found] == ["q-ok"]
    assert warnings == [
        f"queue folder {folder}: skipped 4 files of user {ME} (1 a symbolic link (not "
        f"followed); 1 gpus is not a list of GPU indices; 1 not JSON; 1 over "
        f"{tickets.TICKET_MAX_BYTES} bytes; the first: {ME}.ticket.huge.json)"]


@needs_root
def test_a_ticket_named_after_another_user_is_skipped(folder: Path) -> None:
    tickets.op_ticket_put(TicketRequest("q-mine", gpus=(1,)))
    forged = folder / "somebody.ticket.q-2.json"
    forged.write_text(json.dumps(_body(id="q-2", queued=0.0)))
    os.chown(forged, NOBODY, NOBODY)
    found, warnings = tickets.read_tickets(time.time())
    assert [t["id"] for t in found] == ["q-mine"]
    assert warnings == [f"queue folder {folder}: skipped {forged.name} of user "
                        f"{user_name(NOBODY)}: named after user somebody"]
    assert tickets.op_ticket_drop(TicketRequest("q-2")) == TicketDropAnswer(dropped=False)
    assert forged.exists()


# ---------------------------------------------------------------- whose turn (pure)

def _t(ident: str, user: str, uid: int, queued: float, gpus: tuple[int, ...] | None = (0,),
       count: int | None = None, state: str = "waiting") -> Ticket:
    return Ticket("h1", ident, user, uid, Want(gpus, count), queued, queued, state)


FREE = HostFree("h1", (0, 1, 2, 3))
BUSY0 = HostFree("h1", (1, 2, 3), ("GPU 0: held by carol (pid 42 sleep 300)",), (0,))


@pytest.mark.parametrize("line, free, want, ready, position, why", [
    # alone, GPUs free: its turn
    ([_t("a", "alice", 1, 1.0)], FREE, Want((0,)), True, 1, "free"),
    # alone, GPU 0 held: waits for its holder
    ([_t("a", "alice", 1, 1.0)], BUSY0, Want((0,)), False, 1,
     "GPU 0: held by carol (pid 42 sleep 300)"),
    # bob queued first for GPU 0: alice waits, even with GPU 0 free
    ([_t("a", "alice", 1, 2.0), _t("b", "bob", 2, 1.0)], FREE, Want((0,)), False, 2,
     "1 job queued first (bob's b, for GPU 0)"),
    # bob's ticket is stale (his waiter is gone): it holds nobody back
    ([_t("a", "alice", 1, 2.0), _t("b", "bob", 2, 1.0, state="stale")], FREE, Want((0,)),
     True, 1, "free"),
    # bob waits for GPU 1 only: no rival of alice's GPU 0
    ([_t("a", "alice", 1, 2.0), _t("b", "bob", 2, 1.0, gpus=(1,))], FREE, Want((0,)), True, 1,
     "free"),
    # bob waits for any 2 free GPUs: a rival of every GPU
    ([_t("a", "alice", 1, 2.0), _t("b", "bob", 2, 1.0, gpus=None, count=2)], FREE, Want((0,)),
     False, 2, "1 job queued first (bob's b, for 2 free GPUs)"),
    # alice wants 2 free GPUs: 3 are free
    ([_t("a", "alice", 1, 1.0, gpus=None, count=2)], BUSY0, Want(None, 2), True, 1, "free"),
    # alice wants 4: too few
    ([_t("a", "alice", 1, 1.0, gpus=None, count=4)], BUSY0, Want(None, 4), False, 1,
     "3 free GPUs of 4 wanted (GPU 0: held by carol (pid 42 sleep 300))"),
    # a ticket of the same id but another owner is not ours
    ([_t("a", "mallory", 9, 0.5)], FREE, Want((0,)), False, None, "its ticket is not there"),
    # a GPU the host does not have
    ([_t("a", "alice", 1, 1.0, gpus=(7,))], FREE, Want((7,)), False, 1,
     "GPU 7: not on this host"),
])
def test_host_turn_first_come_first_served(line: list[Ticket], free: HostFree, want: Want,
                                           ready: bool, position: int | None,
                                           why: str) -> None:
    turn = host_turn(HostView("h1", free, tuple(line), 1), "a", want)
    assert (turn.ready, turn.position, turn.why) == (ready, position, why)


def test_ticket_of_reads_the_agent_answer() -> None:
    raw = {"id": "q-1", "user": "bob", "uid": 2, "gpus": [0, 1], "count": None, "queued": 5.0,
           "beat": 6.0, "state": "waiting", "job": "lab", "client": "laptop"}
    t = ticket_of("h1", raw)
    assert t.want == Want((0, 1)) and t.want.words() == "GPUs 0, 1"
    assert t.to_json()["wants"] == {"gpus": [0, 1], "count": None}
