"""`tfctl lab`'s rows, the refusal of claimed GPUs, `HOST:GPUS` and durations, and the host's
nvidia-smi reading and idle measure — the pure parts, table-tested on recorded answers."""

from __future__ import annotations

from typing import Any

import pytest

from tfctl.remote.agent.lab import next_low, parse_app_lines, parse_gpu_lines
from tfctl.remote.agent.vocab import GpuState
from tfctl.remote.gpus.busy import judge_gpus_busy
from tfctl.remote.gpus.nvsmi import GpuProcess
from tfctl.remote.lab.claims import blocking, clock, host_claims
from tfctl.remote.lab.targets import parse_duration, parse_targets
from tfctl.remote.lab.view import host_lab, row_cells, row_json

NOW = 1_800_000_000.0
ME, ALICE, BOB = 1000, 1001, 1002


def _claim(uid: int, user: str, kind: str, state: str = "live", **extra: Any) -> dict[str, Any]:
    base = {"file": f"{user}.{kind}.x.json", "uid": uid, "user": user, "kind": kind,
            "state": state, "gpus": [], "tasks": [], "since": NOW - 3600, "until": None,
            "run_id": None, "job": None, "note": None}
    return dict(base, **extra)


ALICE_RUN = _claim(ALICE, "alice", "run", run_id="r-a", job="mnist", gpus=[0],
                   tasks=[{"name": "worker:0", "gpus": [0], "pid": 500, "pgid": 499}])
BOB_RESERVES = _claim(BOB, "bob", "reservation", gpus=[1], until=NOW + 7200, note="ICML runs")
STALE = _claim(ALICE, "alice", "run", "stale", run_id="r-old", gpus=[2],
               tasks=[{"name": "worker:0", "gpus": [2], "pid": 9, "pgid": 9}])


def _answer(**extra: Any) -> GpuState:
    """One host's `lab` answer, as its wire data is read."""
    gpus = [{"index": i, "uuid": f"GPU-{i}", "name": "TITAN X", "memory_used_mib": 5.0,
             "memory_total_mib": 12288.0, "utilization_pct": 0.0} for i in range(4)]
    base = {"me": {"uid": ME, "user": "me"}, "claims": [ALICE_RUN, BOB_RESERVES, STALE],
            "warnings": ["skipped claim /tmp/tfctl-claims/x.json: a symbolic link (not "
                         "followed)"],
            "gpus": gpus, "error": None,
            "apps": [{"gpu_uuid": "GPU-0", "pid": 501, "used_memory_mib": 1500.0},
                     {"gpu_uuid": "GPU-3", "pid": 700, "used_memory_mib": 11000.0}],
            "procs": {"501": {"pid": 501, "uid": ALICE, "user": "alice", "pgid": 499,
                              "cmdline": "python train.py", "since": NOW - 3500,
                              "tfctl_run_id": None},
                      "700": {"pid": 700, "uid": 1003, "user": "carol", "pgid": 700,
                              "cmdline": "jupyter-kernel", "since": NOW - 86400,
                              "tfctl_run_id": None}},
            "idle": {"sampled_at": NOW, "watching_since": NOW - 7200, "sample_s": 10.0,
                     "low_since": {"3": {"700": NOW - 1800}}}}
    return GpuState.from_wire(dict(base, **extra))


def test_every_gpu_is_one_row_free_reserved_or_held_and_by_whom() -> None:
    found = host_lab("titan", _answer(), idle_after_s=600)
    assert [(r.index, r.state) for r in found.rows] == [
        (0, "held"), (1, "reserved"), (2, "free"), (3, "held")]
    run, reserved, free, notebook = (row_cells(r) for r in found.rows)
    # another user's process of their run is their run (its process group is the claim's)
    assert (run["who"], run["what"]) == ("alice", "run r-a (job mnist) worker:0")
    assert run["since"] == clock(NOW - 3600) and run["note"] == ""
    assert (reserved["who"], reserved["what"]) == ("bob", f"until {clock(NOW + 7200)} "
                                                          "(ICML runs)")
    assert free["note"] == "stale claim: alice's run r-old (its processes are gone)"
    assert (notebook["who"], notebook["what"], notebook["note"]) == (
        "carol", "pid 700 jupyter-kernel", "idle 30 min")
    assert found.warnings == ("titan: skipped claim /tmp/tfctl-claims/x.json: a symbolic link "
                              "(not followed)",)
    as_json = row_json(found.rows[3])
    assert as_json["holders"] == [{"kind": "process", "user": "carol", "pid": 700,
                                   "command": "jupyter-kernel", "memory_mib": 11000.0,
                                   "since": NOW - 86400, "run_id": None, "job": None,
                                   "task": None, "low_util_s": 1800.0, "idle": True,
                                   "policy_idle_since": None, "policy_stop_at": None,
                                   "session": ""}]


def test_each_users_share_of_the_week_is_said_beside_their_gpus() -> None:
    from tfctl.remote.lab.view import unreachable, with_shares
    from tfctl.tui.app.labview import lab_cells

    answer = _answer(week_held={"alice": [2700.0, 0.0], "carol": [900.0, 900.0]})
    hosts = with_shares([host_lab("titan", answer), unreachable("gtx", "timed out")])
    assert hosts[0].week_shares == {"alice": 0.75, "carol": 0.25}
    run, reserved, _, notebook = (row_cells(r, hosts[0].week_shares) for r in hosts[0].rows)
    assert run["who"] == "alice (75 % this week)" and notebook["who"] == "carol (25 % this week)"
    assert reserved["who"] == "bob"  # no use recorded this week: no share said
    assert row_json(hosts[0].rows[0], hosts[0].week_shares)["week_share"] == {"alice": 0.75}
    assert lab_cells(hosts[0])[3][3] == "carol (25 % this week)"  # the dashboard's lab view


def test_idle_needs_the_threshold_and_a_recent_sample() -> None:
    short = host_lab("titan", _answer(), idle_after_s=3600).rows[3].holders[0]
    assert (short.low_util_s, short.idle) == (1800.0, False)
    unmeasured = host_lab("titan", _answer(idle={"sampled_at": None, "low_since": {}}))
    assert unmeasured.rows[3].holders[0].low_util_s is None
    assert unmeasured.watching_since_s is None


def test_a_claimed_gpu_is_held_before_its_process_is_on_it() -> None:
    answer = _answer(apps=[], procs={})
    row = host_lab("titan", answer).rows[0]
    assert row.state == "held" and row.holders[0].run_id == "r-a"


NO_SMI = "no nvidia-smi on the PATH there"
FAILED = "nvidia-smi failed: NVIDIA-SMI has failed because it couldn't communicate with the driver"


@pytest.mark.parametrize(("cpu_only", "gpus", "error", "state", "what"), [
    # the inventory gives the host no GPUs (`gpus: 0`): nothing to show is as it should be
    (True, 0, NO_SMI, "cpu", "CPU only"),
    (True, 0, None, "cpu", "CPU only"),  # nvidia-smi there, listing no GPU
    (True, 0, FAILED, "error", FAILED),  # a driver that fails is still said
    (True, 2, None, "free", ""),  # a host with GPUs shows them: the lab is every user's
    # the inventory selects GPUs there: none to see is an error
    (False, 0, NO_SMI, "error", NO_SMI),
    (False, 0, None, "error", "nvidia-smi lists no GPUs"),
    (False, 0, FAILED, "error", FAILED),
])
def test_a_host_without_gpus_is_cpu_only_where_the_inventory_says_so(
        cpu_only: bool, gpus: int, error: str | None, state: str, what: str) -> None:
    listed = [{"index": i, "uuid": f"GPU-{i}", "name": "TITAN X", "memory_used_mib": 5.0,
               "memory_total_mib": 12288.0, "utilization_pct": 0.0} for i in range(gpus)]
    found = host_lab("box", _answer(gpus=listed, error=error, claims=[], apps=[], procs={}),
                     cpu_only=cpu_only)
    first = found.rows[0]
    assert (len(found.rows), first.state, row_cells(first)["what"]) == (max(gpus, 1), state, what)
    assert row_json(first)["state"] == state
    assert row_json(first)["error"] == (error or "nvidia-smi lists no GPUs"
                                        if state == "error" else None)


def test_blocking_is_another_users_live_claim_on_the_gpus_asked() -> None:
    claims = host_claims("titan", _answer())
    assert [(g, c.user, c.kind) for g, c in blocking(claims, [0, 1, 2, 3], {})] == [
        (0, "alice", "run"), (1, "bob", "reservation")]
    mine = host_claims("titan", _answer(me={"uid": BOB, "user": "bob"}))
    assert [(g, c.user) for g, c in blocking(mine, [1], {})] == []  # his own: his to use
    assert blocking(claims, [0], {}, own_run_id="r-a") == []
    expired = host_claims("titan", _answer(claims=[dict(BOB_RESERVES, state="expired")]))
    assert blocking(expired, [1], {}) == []


def test_up_is_refused_a_reserved_gpu_naming_who_and_until_when() -> None:
    claims = host_claims("titan", _answer())
    gpus = {f"GPU-{i}": i for i in range(4)}
    apps = [GpuProcess("GPU-0", 501, 1500.0, "python")]
    procs = {501: {"user": "alice", "cmdline": "python train.py", "pgid": 499,
                   "tfctl_run_id": None}}
    state = judge_gpus_busy("titan", ("0", "1"), gpus, apps, procs, claims=claims)
    assert [u.describe() for u in (*state.busy, *state.claimed)] == [
        "GPU 0: pid 501 (user alice, 1500 MiB, python train.py); tfctl run r-a worker:0",
        f"GPU 1: reserved by bob until {clock(NOW + 7200)} (ICML runs)"]
    assert state.free == (2, 3)  # the stale claim's GPU is free; bob's and alice's are not
    own = judge_gpus_busy("titan", ("1",), gpus, [], {}, claims=host_claims(
        "titan", _answer(me={"uid": BOB, "user": "bob"})))
    assert own.busy == () and own.claimed == ()


@pytest.mark.parametrize("text, seconds", [("3d", 259200.0), ("12h", 43200.0),
                                           ("90m", 5400.0), ("1d12h", 129600.0),
                                           ("45s", 45.0), ("2w", 1209600.0), ("1.5h", 5400.0)])
def test_durations(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "3", "3 days", "d3", "0h", "3d-1h"])
def test_a_bad_duration_is_one_sentence(text: str) -> None:
    with pytest.raises(ValueError, match="duration"):
        parse_duration(text)


def test_targets() -> None:
    assert parse_targets(["titan:2,3", "gtx970:0", "titan:1-2"], ["titan", "gtx970"]) == {
        "titan": [2, 3, 1], "gtx970": [0]}
    for bad, words in [(["titan"], "name the GPUs too"), (["nope:1"], "no host 'nope'"),
                       (["titan:x"], "nvidia-smi indices"), ([], "at least one")]:
        with pytest.raises(ValueError, match=words):
            parse_targets(bad, ["titan"])


# ---------------------------------------------------------------- the host side, pure

def test_nvidia_smi_lines_are_read_plainly() -> None:
    gpus = parse_gpu_lines("0, GPU-a, 1505, 12288, 97, 212.5, NVIDIA TITAN X (Pascal)\n"
                           "1, GPU-b, [N/A], 4096, [Not Supported], [Not Supported], GeForce, "
                           "GTX 970\nFailed to initialize NVML\n")
    assert gpus == [
        {"index": 0, "uuid": "GPU-a", "memory_used_mib": 1505.0, "memory_total_mib": 12288.0,
         "utilization_pct": 97.0, "power_w": 212.5, "name": "NVIDIA TITAN X (Pascal)"},
        {"index": 1, "uuid": "GPU-b", "memory_used_mib": None, "memory_total_mib": 4096.0,
         "utilization_pct": None, "power_w": None, "name": "GeForce, GTX 970"}]
    assert parse_app_lines("GPU-a, 4242, 1500\nNo running processes found\n") == [
        {"gpu_uuid": "GPU-a", "pid": 4242, "used_memory_mib": 1500.0}]


def test_the_sampler_measures_a_holder_low_since_its_first_low_sample() -> None:
    gpus = [{"index": 0, "uuid": "GPU-a", "utilization_pct": 0.0}]
    apps = [{"gpu_uuid": "GPU-a", "pid": 7}]
    state = next_low(None, 100.0, gpus, apps, 10.0)
    state = next_low(state, 110.0, gpus, apps, 10.0)
    assert state["gpus"]["0"]["low"] == {"7": 100.0} and state["started"] == 100.0
    busy = next_low(state, 120.0, [dict(gpus[0], utilization_pct=50.0)], apps, 10.0)
    assert busy["gpus"]["0"]["low"] == {}
    again = next_low(busy, 130.0, gpus, apps, 10.0)
    assert again["gpus"]["0"]["low"] == {"7": 130.0}  # a busy sample starts it over
    gap = next_low(again, 200.0, gpus, apps, 10.0)  # the sampler was away: not measured
    assert gap["gpus"]["0"]["low"] == {"7": 200.0} and gap["started"] == 200.0
    other = next_low(gap, 210.0, gpus, [{"gpu_uuid": "GPU-a", "pid": 8}], 10.0)
    assert other["gpus"]["0"]["low"] == {"8": 210.0}  # another process: its own start


def test_a_run_the_lab_policy_warned_as_idle_says_when_it_stops() -> None:
    """Its claim carries the watcher's warning (agent/idlewatch.py): every user's `lab` shows
    how long it has been idle and when the policy stops it; another process idle is shown as
    before, with how long, and nothing is said of stopping it."""
    import time

    warned = dict(ALICE_RUN, idle={"since": NOW - 3900, "stop_at": NOW + 3600})
    found = host_lab("titan", _answer(claims=[warned, BOB_RESERVES]), idle_after_s=600)
    (holder,) = found.rows[0].holders
    stops = time.strftime("%H:%M", time.localtime(NOW + 3600))
    assert holder.policy_words(NOW) == f"idle 1:05 — stops at {stops} by the lab's policy"
    assert "by the lab's policy" in row_cells(found.rows[0])["note"]
    assert row_json(found.rows[0])["holders"][0]["policy_stop_at"] == NOW + 3600
    assert row_cells(found.rows[3])["note"] == "idle 30 min"
