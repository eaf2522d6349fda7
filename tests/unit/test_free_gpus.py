"""`gpus: free`: the inventory's spelling, located mistakes, and which GPUs placement takes (pure).

The judgement is table-tested on `view.host_lab` rows built from a host's `gpu_state` answer
(the agent's), as a real host gives it; the testbed test (tests/testbed/test_free_gpus.py) does
the I/O.
"""

from __future__ import annotations

from typing import Any

import pytest

from tfctl.inventory import InventoryError, parse_inventory
from tfctl.inventory.model import FreeGpus
from tfctl.inventory.plan import make_plan
from tfctl.remote.agent.vocab import GpuState
from tfctl.remote.lab.freegpus import HostFree, choose, host_free, with_gpus
from tfctl.remote.lab.view import host_lab

BASE = "name: t\nhosts:\n  - name: box\n    gpus: {gpus}\njob:\n  script: train.py\n"


def _inv(gpus: str) -> Any:
    return parse_inventory(BASE.format(gpus=gpus), "c.yaml")


@pytest.mark.parametrize("written, count, workers", [
    ("free", None, 1), ("{free: 2}", 2, 2), ("{free: 1}", 1, 1)])
def test_free_is_spelled_two_ways_and_planned_as_a_stand_in(written: str, count: int | None,
                                                            workers: int) -> None:
    inv = _inv(written)
    assert inv.hosts[0].free_gpus == FreeGpus(count)
    plan = make_plan(inv)
    assert len([t for t in plan.tasks if t.type == "worker"]) == workers


@pytest.mark.parametrize("written", ["{free: 0}", "fre", "{free: two}", "{free: 2, more: 1}",
                                     "{free: 65}"])
def test_a_wrong_free_is_located(written: str) -> None:
    with pytest.raises(InventoryError) as found:
        _inv(written)
    e = found.value
    assert e.line == 4 and e.key_path == "hosts[0].gpus", str(e)
    assert "`free` or `{free: 2}`" in str(e)


def _answer(apps: list[dict[str, Any]], claims: list[dict[str, Any]], me: int = 1000,
            procs: dict[str, Any] | None = None) -> GpuState:
    gpus = [{"index": i, "uuid": f"GPU-{i}", "name": "T4"} for i in range(4)]
    return GpuState.from_wire({
        "me": {"uid": me, "user": "me"}, "claims": claims, "warnings": [], "gpus": gpus,
        "apps": apps, "error": None, "procs": procs or {
            str(a["pid"]): {"pid": a["pid"], "uid": 1001, "user": "carol",
                            "cmdline": "sleep 300"} for a in apps}})


def _reservation(user: str, uid: int, gpu: int) -> dict[str, Any]:
    return {"file": f"{user}.reservation.gpu{gpu}.json", "user": user, "uid": uid,
            "kind": "reservation", "state": "live", "gpus": [gpu], "until": 2e9,
            "note": "ICML"}


CASES = [
    # (apps, claims, free, taken starts)
    ([], [], (0, 1, 2, 3), ()),
    ([{"pid": 42, "gpu_uuid": "GPU-0", "used_memory_mib": 1500.0}], [], (1, 2, 3),
     ("GPU 0: held by carol (pid 42 sleep 300)",)),
    ([], [_reservation("bob", 1002, 2)], (0, 1, 3), ("GPU 2: reserved by bob until",)),
    ([], [_reservation("me", 1000, 2)], (0, 1, 2, 3), ()),  # one's own reservation is free
    ([], [{"file": "alice.run.r1.json", "user": "alice", "uid": 1003, "kind": "run",
           "state": "live", "gpus": [3], "run_id": "r1", "job": "mnist",
           "tasks": [{"name": "worker:0", "gpus": [3], "pid": 77, "pgid": 77}]}],
     (0, 1, 2), ("GPU 3: held by alice (run r1 (job mnist) worker:0)",)),
    ([], [{"file": "alice.run.r0.json", "user": "alice", "uid": 1003, "kind": "run",
           "state": "stale", "gpus": [3], "run_id": "r0",
           "tasks": [{"name": "worker:0", "gpus": [3], "pid": 77, "pgid": 77}]}],
     (0, 1, 2, 3), ()),  # a stale claim is never obeyed
]


@pytest.mark.parametrize("apps, claims, free, taken", CASES)
def test_free_gpus_are_those_nobody_holds_or_reserved(apps: list[dict[str, Any]],
                                                      claims: list[dict[str, Any]],
                                                      free: tuple[int, ...],
                                                      taken: tuple[str, ...]) -> None:
    found = host_free(host_lab("box", _answer(apps, claims)))
    assert found.free == free and found.error is None
    assert len(found.taken) == len(taken)
    for said, start in zip(found.taken, taken, strict=True):
        assert said.startswith(start), said


def test_an_unreadable_host_has_no_free_gpus() -> None:
    found = host_free(host_lab("box", GpuState(error="no nvidia-smi on the PATH there")))
    assert found.error == "no nvidia-smi on the PATH there" and choose(FreeGpus(None),
                                                                      found) is None


@pytest.mark.parametrize("count, free, took", [
    (None, (1, 2, 3), (1, 2, 3)), (2, (1, 2, 3), (1, 2)), (3, (1, 2, 3), (1, 2, 3)),
    (4, (1, 2, 3), None), (None, (), None)])
def test_choose_takes_the_lowest_or_nothing(count: int | None, free: tuple[int, ...],
                                            took: tuple[int, ...] | None) -> None:
    assert choose(FreeGpus(count), HostFree("box", free)) == took


def test_placed_inventory_plans_one_worker_per_gpu_taken() -> None:
    inv = with_gpus(_inv("free"), {"box": (1, 2, 3)})
    assert inv.hosts[0].free_gpus is None and inv.hosts[0].gpus == (1, 2, 3)
    assert [t.cuda_visible_devices for t in make_plan(inv).tasks if t.type == "worker"] == [
        "1", "2", "3"]
