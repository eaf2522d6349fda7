"""The fair queue and the per-user limit (remote/queue/turn.py, points.py), table-tested; each
user's recent use as the host's agent reads it (remote/agent/recentuse.py) on this machine's
real filesystem; and the policy's `queue` and `limits` keys (remote/agent/policy.py)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from tfctl.inventory import make_plan, parse_inventory
from tfctl.remote.agent import ledger, recentuse
from tfctl.remote.agent.policy import (
    PolicyError,
    parse_policy,
    parse_policy_parts,
    policy_words,
    read_policy,
    reserve_refusal,
)
from tfctl.remote.agent.proc import user_name
from tfctl.remote.agent.vocab import ClaimsAnswer, HostUser, UpCheck
from tfctl.remote.errors import OverLimit
from tfctl.remote.lab.freegpus import HostFree
from tfctl.remote.queue.points import place_points
from tfctl.remote.queue.tickets import Ticket, Want
from tfctl.remote.queue.turn import Hold, HostView, host_turn, line_of, queue_key, usable
from tfctl.remote.runs.up.check import judge_limit

ME = user_name(os.getuid()) or str(os.getuid())
DAY = 86400.0


def _t(ident: str, user: str, uid: int, queued: float, gpus: tuple[int, ...] | None = (0,),
       count: int | None = None, state: str = "waiting") -> Ticket:
    return Ticket("h1", ident, user, uid, Want(gpus, count), queued, queued, state)


FREE = HostFree("h1", (0, 1, 2, 3))
ALICE_FIRST = (_t("a", "alice", 1, 1.0), _t("b", "bob", 2, 2.0))


# ---------------------------------------------------------------- the order (pure)

@pytest.mark.parametrize("order, use, first", [
    ("fifo", {}, "a"),
    ("fifo", {"alice": 9.0, "bob": 1.0}, "a"),  # fifo ignores use
    ("fair", {"alice": 9.0, "bob": 1.0}, "b"),  # alice used more: bob first
    ("fair", {"alice": 9.0}, "b"),              # bob used nothing
    ("fair", {"alice": 1.0, "bob": 9.0}, "a"),
    ("fair", {"alice": 2.0, "bob": 2.0}, "a"),  # equal use: arrival breaks the tie
    ("fair", {}, "a"),
])
def test_fair_order_takes_the_least_recent_use_first(order: str, use: dict[str, float],
                                                    first: str) -> None:
    view = HostView("h1", FREE, ALICE_FIRST, 1, order=order, use=use)
    assert sorted(ALICE_FIRST, key=lambda t: queue_key(t, order, use))[0].id == first
    assert line_of(view)[0][0].id == first
    mine = next(t for t in ALICE_FIRST if t.id == first)
    other = next(t for t in ALICE_FIRST if t.id != first)
    ready = host_turn(HostView("h1", FREE, ALICE_FIRST, mine.uid, order=order, use=use),
                      first, Want((0,)))
    held = host_turn(HostView("h1", FREE, ALICE_FIRST, other.uid, order=order, use=use),
                     other.id, Want((0,)))
    assert (ready.ready, ready.position) == (True, 1)
    assert (held.ready, held.position, held.why) == (
        False, 2, f"1 job queued first ({mine.user}'s {first}, for GPU 0)")


def test_the_queue_says_each_users_share() -> None:
    view = HostView("h1", FREE, ALICE_FIRST, 1, order="fair", use={"alice": 3.0, "bob": 1.0})
    assert [(t.id, why) for t, why in line_of(view)] == [
        ("b", "fair: bob used 1.00 GPU-h recently, 25 % of the recent use here"),
        ("a", "fair: alice used 3.00 GPU-h recently, 75 % of the recent use here")]
    fifo = HostView("h1", FREE, ALICE_FIRST, 1)
    assert [(t.id, why) for t, why in line_of(fifo)] == [
        ("a", "first come, first served"), ("b", "first come, first served")]


def test_a_fair_sweep_gives_the_lighter_user_the_gpus_first() -> None:
    line = (_t("a", "alice", 1, 1.0, gpus=None, count=1), _t("b", "bob", 2, 2.0, gpus=None,
                                                                count=1))
    view = HostView("h1", HostFree("h1", (3,)), line, 1, order="fair", use={"alice": 5.0})
    free, reason = usable(view, "a", None)
    assert free == [] and reason is not None and reason.hold is Hold.QUEUED_FIRST
    bob = HostView("h1", HostFree("h1", (3,)), line, 2, order="fair", use={"alice": 5.0})
    assert usable(bob, "b", None) == ([3], None)


# ---------------------------------------------------------------- the limit (pure)

@pytest.mark.parametrize("held, others_wait, exceed, want, ready, why", [
    (1, True, True, Want((0,)), True, "free"),         # 1 + 1 <= 2
    (2, False, True, Want((0,)), True, "free"),        # over, but nobody else waits
    (2, False, False, Want((0,)), False,               # over, and the lab lets nobody pass
     "the lab's limit is 2 GPUs per user and alice holds 2: 1 more must wait"),
    (2, True, True, Want((0,)), False,
     "the lab's limit is 2 GPUs per user and alice holds 2: 1 more must wait while bob's b "
     "waits"),
    (0, True, True, Want((0, 1, 2)), False,            # 3 at once is over a limit of 2
     "the lab's limit is 2 GPUs per user and alice holds 0: 3 more must wait while bob's b "
     "waits"),
])
def test_the_limit_per_user(held: int, others_wait: bool, exceed: bool, want: Want,
                            ready: bool, why: str) -> None:
    line = [_t("a", "alice", 1, 1.0, gpus=want.gpus)]
    if others_wait:
        line.append(_t("b", "bob", 2, 2.0, gpus=(3,)))
    view = HostView("h1", FREE, tuple(line), 1, gpus_per_user=2, held={"alice": held},
                    exceed_when_nobody_waits=exceed)
    turn = host_turn(view, "a", want)
    assert (turn.ready, turn.why) == (ready, why)


def test_a_user_over_the_limit_stands_aside_for_the_others() -> None:
    # alice queued first, but holds her 2 GPUs: bob, younger, goes first
    view = HostView("h1", FREE, ALICE_FIRST, 2, gpus_per_user=2, held={"alice": 2})
    assert host_turn(view, "b", Want((0,))).ready
    # without the limit bob waits for alice's ticket
    assert not host_turn(HostView("h1", FREE, ALICE_FIRST, 2), "b", Want((0,))).ready


def test_a_sweep_takes_points_up_to_the_limit() -> None:
    line = (_t("s", "alice", 1, 1.0, gpus=None, count=1), _t("b", "bob", 2, 2.0, gpus=(3,)))
    view = HostView("h1", HostFree("h1", (0, 1, 2)), line, 1, gpus_per_user=2,
                    held={"alice": 1})
    placed = place_points(1, 3, "s", [view], {"h1": None})
    assert [g for _, g in placed.taken] == [(0,)]  # 1 held + 1 taken = the limit
    assert placed.held_by(Hold.OVER_LIMIT) == ["h1"]
    assert "the lab's limit is 2 GPUs per user and alice holds 2" in placed.words()
    alone = HostView("h1", HostFree("h1", (0, 1, 2)), line[:1], 1, gpus_per_user=2,
                     held={"alice": 1})
    assert len(place_points(1, 3, "s", [alone], {"h1": None}).taken) == 3  # nobody waits


# ---------------------------------------------------------------- recent use (real files)

@pytest.mark.parametrize("gpu_s, age_days, half_life_days, hours", [
    (3600.0, 0.0, 3.0, 1.0),
    (7200.0, 3.0, 3.0, 1.0),
    (7200.0, 6.0, 3.0, 0.5),
    (-50.0, 0.0, 3.0, 0.0),          # nothing negative
    (3600.0, -1.0, 3.0, 1.0),        # ended "in the future": no more than its hours
])
def test_decayed_hours(gpu_s: float, age_days: float, half_life_days: float,
                       hours: float) -> None:
    now = 1e9
    assert recentuse.decayed_hours(gpu_s, now - age_days * DAY, now,
                                   half_life_days * DAY) == pytest.approx(hours)


def _ledger_hours(now: float, hours: dict[float, float]) -> dict[str, list[float]]:
    """{hour key: [held_s, 0, 0, 0]} for GPU-seconds held `age_s` ago → seconds."""
    return {str(int((now - age_s) // 3600)): [held, 0.0, 0.0, 0.0]
            for age_s, held in hours.items()}


def test_recent_use_weighs_the_ledger_decayed(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TFCTL_CLAIMS_DIR", str(tmp_path / "claims"))
    now = (time.time() // 3600) * 3600 + 1800  # half way through an hour
    ledger.ledger_write("run", "r1", {"run_id": "r1", "job": "lab", "gpus": {
        "GPU-a": {"index": 0, "uuid": "GPU-a", "name": "x", "hours": _ledger_hours(now, {
            0.0: 1800.0,                      # this hour, until now: 0.5 h, not decayed
            3 * DAY: 3600.0,                  # an hour that ended 3 days - 30 min ago
            40 * DAY: 3600.0})}}})            # beyond 10 half-lives: not read
    ledger.ledger_write("run", "r2", {"run_id": "r2", "job": "lab", "gpus": {
        "GPU-b": {"index": 1, "uuid": "GPU-b", "name": "x", "hours": _ledger_hours(now, {
            -2 * 3600.0: 3600.0})}}})         # an hour after now (a clock that jumped): nothing
    expected = 0.5 + 2 ** (-(3 * DAY - 1800) / (3 * DAY))
    assert recentuse.recent_use(3 * DAY, now) == {ME: pytest.approx(expected)}
    assert recentuse.recent_use(3 * DAY, now, str(tmp_path / "elsewhere")) == {}


# ---------------------------------------------------------------- the policy's keys

FAIR = "queue: {order: fair, half_life: 2d}\nlimits:\n  gpus_per_user: 2\n  max_reserve: 8h\n"


def test_queue_and_limits_are_read() -> None:
    policy = parse_policy(FAIR)
    assert policy == {"queue": {"order": "fair", "half_life_s": 2 * DAY},
                      "limits": {"gpus_per_user": 2, "max_reserve_s": 8 * 3600.0,
                                 "exceed_when_nobody_waits": True}}
    assert policy_words(policy) == ("queue: fair (least recent use first, half-life 2d); "
                                    "limits: 2 GPUs per user (more while nobody waits), "
                                    "reservations up to 8h")
    assert parse_policy("queue: {order: fifo}\n") == {
        "queue": {"order": "fifo", "half_life_s": 3 * DAY}}


@pytest.mark.parametrize("text, line, why, kept", [
    ("queue: {order: fair, half_life: soon}\nlimits: {gpus_per_user: 2}\n", 1,
     "queue.half_life: 'soon' is not a duration", ["limits"]),
    ("queue: {order: random}\nlimits: {gpus_per_user: 2}\n", 1,
     "queue.order must be fifo or fair, not 'random'", ["limits"]),
    ("queue: {order: fair}\nlimits:\n  gpus_per_usr: 2\n", 3,
     "unknown key limits.gpus_per_usr", ["queue"]),
    ("queue: {order: fair}\nlimits: {gpus_per_user: 0}\n", 2,
     "limits.gpus_per_user must be a whole number of at least 1", ["queue"]),
    ("queue: {order: fair}\nlimits: {max_reserve: 8 hours}\n", 2,
     "limits.max_reserve: '8 hours' is not a duration", ["queue"]),
    ("quota: 3\nqueue: {order: fair}\n", 1, "unknown key quota", ["queue"]),
])
def test_a_bad_rule_is_named_with_its_line_and_the_rest_applies(
        text: str, line: int, why: str, kept: list[str], tmp_path: Path) -> None:
    policy, problems = parse_policy_parts(text)
    assert sorted(policy) == kept
    assert [p.line for p in problems] == [line] and problems[0].why.startswith(why)
    with pytest.raises(PolicyError):
        parse_policy(text)
    path = tmp_path / "lab.yaml"
    path.write_text(text)
    reading = read_policy(str(path), str(tmp_path / "claims"))
    assert reading["ignored"] is None and sorted(reading["policy"]) == kept
    assert reading["problems"] == [f"the lab policy {path}: line {line}: {problems[0].why} "
                                   "(that rule is left out; the rest applies)"]


@pytest.mark.parametrize("limits, for_s, held, wanted, waiting, said", [
    (None, 3 * DAY, 9, 9, "bob's q-1", None),
    ({"gpus_per_user": None, "max_reserve_s": 8 * 3600.0, "exceed_when_nobody_waits": True},
     3 * DAY, 0, 1, None, "the lab's policy lets a reservation last at most 8h, not 3d"),
    ({"gpus_per_user": 2, "max_reserve_s": None, "exceed_when_nobody_waits": True},
     DAY, 1, 1, "bob's q-1", None),
    ({"gpus_per_user": 2, "max_reserve_s": None, "exceed_when_nobody_waits": True},
     DAY, 2, 1, None, None),
    ({"gpus_per_user": 2, "max_reserve_s": None, "exceed_when_nobody_waits": True},
     DAY, 2, 1, "bob's q-1",
     "the lab's limit is 2 GPUs per user and alice holds 2: 1 more must wait while bob's q-1 "
     "waits"),
    ({"gpus_per_user": 2, "max_reserve_s": None, "exceed_when_nobody_waits": False},
     DAY, 1, 2, None, "the lab's limit is 2 GPUs per user and alice holds 1: 2 more must wait"),
])
def test_a_reservation_under_the_limits(limits: dict[str, object] | None, for_s: float,
                                        held: int, wanted: int, waiting: str | None,
                                        said: str | None) -> None:
    policy = None if limits is None else {"limits": limits}
    assert reserve_refusal(policy, for_s, "alice", held, wanted, waiting) == said


# ---------------------------------------------------------------- up's limit (pure)

def _up_check(claims: list[dict[str, object]], limits: dict[str, object] | None,
              waiting: str | None) -> UpCheck:
    return UpCheck(claims=ClaimsAnswer(HostUser(1, "alice"), tuple(claims)), limits=limits,
                   waiting=waiting)


@pytest.mark.parametrize("held, limits, waiting, refused", [
    ([], {"gpus_per_user": 2}, "bob's q-1", None),              # 0 + 2 GPUs: at the limit
    ([1], {"gpus_per_user": 2}, "bob's q-1",                     # our reservation of GPU 1
     None),                                                      # is the plan's: counted once
    ([5], {"gpus_per_user": 2}, None, None),                    # over, nobody waits
    ([5], {"gpus_per_user": 2, "exceed_when_nobody_waits": False}, None,
     "a: the lab's limit is 2 GPUs per user and alice holds 1: 2 more must wait "
     "(`tfctl up --when-free` waits for its turn)"),
    ([5], {"gpus_per_user": 2}, "bob's q-1",
     "a: the lab's limit is 2 GPUs per user and alice holds 1: 2 more must wait while bob's "
     "q-1 waits (`tfctl up --when-free` waits for its turn)"),
    ([5], None, "bob's q-1", None),                              # no limit there
])
def test_up_refuses_a_plan_over_the_limit(held: list[int], limits: dict[str, object] | None,
                                          waiting: str | None, refused: str | None) -> None:
    plan = make_plan(parse_inventory(  # type: ignore[arg-type]
        "name: t\nhosts: [{name: a, gpus: [0, 1]}, {name: b, gpus: 0, ps: 0}]\n"
        "job: {script: t.py}\n"))
    claims = [{"uid": 1, "state": "live", "gpus": [g], "kind": "reservation"} for g in held]
    claims.append({"uid": 2, "state": "live", "gpus": [7], "kind": "run"})  # bob's: not ours
    checks = {"a": _up_check(claims, limits, waiting), "b": _up_check([], None, None)}
    if refused is None:
        judge_limit(plan, checks)
    else:
        with pytest.raises(OverLimit) as caught:
            judge_limit(plan, checks)
        assert str(caught.value) == refused
