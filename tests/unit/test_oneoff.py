"""One-off commands and sweeps as data (inventory/oneoff.py): the points of `--each`, the plan of
one point, its manifest; where points go now, first come first served with every user's tickets
(remote/queue/points.py)."""

from __future__ import annotations

import pytest

from tfctl.inventory import parse_inventory
from tfctl.inventory.oneoff import (
    OneOffError,
    Point,
    oneoff_plan,
    parse_each,
    points,
    too_many_gpus,
)
from tfctl.inventory.plan import make_plan
from tfctl.remote.lab.freegpus import HostFree
from tfctl.remote.queue.points import place_points
from tfctl.remote.queue.tickets import Ticket, Want
from tfctl.remote.queue.turn import HostView
from tfctl.remote.runs.endrule import deciders
from tfctl.remote.runs.up.manifest import host_manifest

LAB = """name: lab
defaults: {python: /opt/venv/bin/python, env: {DATA: /data}}
hosts:
  - {name: h1, gpus: [0, 1], env: {NCCL_DEBUG: WARN}}
  - {name: h2, gpus: [0, 1, 2, 3]}
  - {name: cpu, gpus: []}
job:
  script: train.py
  strategy: parameter_server
  chief: true
  setup: [pip install -r requirements.txt]
  notify: {command: echo done}
  restart: {worker: on-failure}
"""
ME = 1000


def test_each_makes_the_product_of_its_lists_and_fills_in_the_command() -> None:
    each = parse_each(["seed=1,2,3", "lr=0.1, 0.01"])
    assert each == [("seed", ("1", "2", "3")), ("lr", ("0.1", "0.01"))]
    found = points(["python", "train.py", "--seed={seed}", "--lr", "{lr}", "{other}"], each)
    assert len(found) == 6
    assert found[0] == Point(("python", "train.py", "--seed=1", "--lr", "0.1", "{other}"),
                             (("seed", "1"), ("lr", "0.1")))
    assert [p.words() for p in found][:3] == ["seed=1 lr=0.1", "seed=1 lr=0.01",
                                              "seed=2 lr=0.1"]
    assert points(["python", "x.py"], []) == [Point(("python", "x.py"))]
    assert points(["python", "x.py"], [])[0].words() == "python x.py"


@pytest.mark.parametrize("argv, each, said", [
    ([], [], "no command to run"),
    (["  "], [], "no command to run"),
    (["python", "x.py"], ["seed=1,2"], "`{seed}` appears nowhere in the command"),
    (["x"], ["seed"], "is not KEY=V1,V2"),
    (["x"], ["1x=2"], "is not KEY=V1,V2"),
    (["x {a}"], ["a=1,,2"], "has an empty value"),
    (["x {a}"], ["a="], "has an empty value"),
    (["x {a}"], ["a=1", "a=2"], "is given twice"),
    (["x {a} {b} {c}"], ["a=" + ",".join(map(str, range(11))), "b=" + ",".join(
        map(str, range(10))), "c=" + ",".join(map(str, range(10)))], "more than 1000"),
])
def test_a_command_line_that_cannot_run_is_one_sentence(argv: list[str], each: list[str],
                                                        said: str) -> None:
    with pytest.raises(OneOffError, match=said) as caught:
        points(argv, parse_each(each))
    assert "\n" not in str(caught.value)


def test_a_point_is_one_worker_with_the_hosts_defaults_and_none_of_the_jobs_shape() -> None:
    inv = parse_inventory(LAB)
    record = {"command": "python train.py --seed 1", "name": None, "sweep": "s-1",
              "point": {"seed": "1"}, "index": 0, "points": 2}
    plan = oneoff_plan(inv, "h1", (1,), Point(("python", "train.py", "--seed", "1")), record)
    (task,) = plan.tasks
    assert (task.name, task.host, task.port, task.cuda_visible_devices) == ("worker:0", "h1",
                                                                          None, "1")
    assert task.argv == ("/opt/venv/bin/python", "train.py", "--seed", "1")
    assert task.cwd == inv.host("h1").workdir
    assert task.env == {"PYTHONUNBUFFERED": "1", "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
                        "DATA": "/data", "NCCL_DEBUG": "WARN", "CUDA_VISIBLE_DEVICES": "1"}
    assert plan.hosts_used == ("h1",) and [h.name for h in plan.inventory.hosts] == ["h1"]
    job = plan.inventory.job
    assert (job.chief, job.tensorboard, job.style, job.restart.for_type("worker")) == (
        None, None, "none", "never")
    assert job.setup == inv.job.setup and job.notify == inv.job.notify
    assert job.sync == inv.job.sync
    assert deciders(plan) == ([task], "all")  # its end is the run's end
    manifest = host_manifest(plan, "h1", "r1", 60.0)
    assert manifest["oneoff"] == record and manifest["notify"] == {"command": "echo done",
                                                                   "webhook": None}
    assert [t["name"] for t in manifest["tasks"]] == ["worker:0"]
    cpu = oneoff_plan(inv, "cpu", (), Point(("./prepare.sh",)), record)
    assert (cpu.tasks[0].argv, cpu.tasks[0].cuda_visible_devices) == (("./prepare.sh",), "")
    assert "oneoff" not in host_manifest(make_plan(inv), "h1", "r2", 60.0)


def test_more_gpus_than_any_host_has_names_the_largest() -> None:
    inv = parse_inventory(LAB)
    assert too_many_gpus(inv, 4) is None and too_many_gpus(inv, 0) is None
    assert too_many_gpus(inv, 5) == ("no host has 5 GPUs: the largest is h2, with 4 GPUs; "
                                     "ask for fewer with --gpus")
    assert too_many_gpus(inv, 3, host="h1") == (
        "host h1 has 2 GPUs that the inventory lets tfctl use, not 3: ask for fewer with "
        "--gpus, or leave --host out")
    free = parse_inventory(LAB.replace("gpus: [0, 1, 2, 3]", "gpus: free"))
    assert too_many_gpus(free, 5) is None  # h2's count is known once it is asked
    assert too_many_gpus(free, 5, {"h2": 8}) is None
    assert "the largest is h2, with 3 GPUs" in str(too_many_gpus(free, 5, {"h2": 3}))


# ---------------------------------------------------------------- where points go now

def _ticket(host: str, ident: str, user: str, uid: int, queued: float, *,
            gpus: tuple[int, ...] | None = None, count: int | None = 1,
            state: str = "waiting") -> Ticket:
    want = Want(gpus=gpus) if gpus is not None else Want(count=count)
    return Ticket(host, ident, user, uid, want, queued, queued, state)


def _view(host: str, free: tuple[int, ...], *tickets: Ticket,
          taken: tuple[tuple[int, str], ...] = ()) -> HostView:
    return HostView(host, HostFree(host, free, tuple(w for _, w in taken),
                                   tuple(g for g, _ in taken)), tickets, ME,
                    tuple(sorted({*free, *(g for g, _ in taken)})))


def test_points_take_free_gpus_host_by_host_n_at_a_time() -> None:
    mine = [_ticket(h, "r-1", "me", ME, 10.0) for h in ("h1", "h2")]
    views = [_view("h1", (0, 1), mine[0], taken=((2, "GPU 2: held by carol (pid 4 x)"),)),
             _view("h2", (0, 1, 2, 3), mine[1])]
    six = place_points(1, 6, "r-1", views, {"h1": (0, 1, 2), "h2": None})
    assert six.taken == (("h1", (0,)), ("h1", (1,)), ("h2", (0,)), ("h2", (1,)), ("h2", (2,)),
                         ("h2", (3,)))
    pairs = place_points(2, 6, "r-1", views, {"h1": (0, 1, 2), "h2": None})
    assert pairs.taken == (("h1", (0, 1)), ("h2", (0, 1)), ("h2", (2, 3)))
    assert pairs.why == {"h1": "GPU 2: held by carol (pid 4 x)", "h2": "no free GPU"}
    only = place_points(1, 4, "r-1", views, {"h1": (1,), "h2": (3,)})  # the inventory's GPUs
    assert only.taken == (("h1", (1,)), ("h2", (3,)))


def test_an_older_ticket_goes_first_and_two_users_never_get_one_gpu() -> None:
    alice = _ticket("h1", "r-a", "alice", 1001, 10.0)
    bob = _ticket("h1", "r-b", "bob", ME, 11.0)
    # bob looks while alice's `run` starts: her count of free GPUs goes first, bob gets none
    seen_by_bob = place_points(1, 1, "r-b", [_view("h1", (0, 1), alice, bob)], {"h1": None})
    assert seen_by_bob.taken == ()
    assert seen_by_bob.why == {"h1": "1 job queued first (alice's r-a, for 1 free GPU)"}
    assert seen_by_bob.only_starting_ahead
    # alice's look, whether it saw bob's younger ticket or not, takes GPU 0
    for seen in ([alice], [alice, bob]):
        alone = HostView("h1", HostFree("h1", (0, 1)), tuple(t if t is not alice else
                         _ticket("h1", "r-a", "alice", ME, 10.0) for t in seen), ME, (0, 1))
        assert place_points(1, 1, "r-a", [alone], {"h1": None}).taken == (("h1", (0,)),)
    # a waiting sweep queued first holds bob back until its points start: not a starting run
    sweep = _ticket("h1", "s-c", "carol", 1002, 5.0)
    held = place_points(1, 1, "r-b", [_view("h1", (0, 1), sweep, bob)], {"h1": None})
    assert held.taken == () and not held.only_starting_ahead
    # a stale ticket (its waiter gone) and a younger one hold nobody back
    stale = _ticket("h1", "s-d", "dave", 1003, 1.0, state="stale")
    young = _ticket("h1", "q-e", "eve", 1004, 99.0)
    assert place_points(1, 1, "r-b", [_view("h1", (0, 1), stale, bob, young)],
                        {"h1": None}).taken == (("h1", (0,)),)


def test_gpus_an_older_ticket_wants_by_index_are_left_to_it() -> None:
    older = _ticket("h1", "q-a", "alice", 1001, 1.0, gpus=(0,), count=None)
    mine = _ticket("h1", "r-b", "bob", ME, 2.0)
    placed = place_points(1, 2, "r-b", [_view("h1", (0, 1), older, mine)], {"h1": None})
    assert placed.taken == (("h1", (1,)),)
    assert placed.why == {"h1": "GPU 0: wanted by alice's q-a, queued first"}
    gone = place_points(1, 1, "r-b", [_view("h1", (0, 1))], {"h1": None})
    assert gone.taken == () and gone.why == {"h1": "our ticket is not there"}
    broken = HostView("h1", HostFree("h1", error="cannot look: h1: unreachable"), (mine,), ME)
    assert place_points(1, 1, "r-b", [broken], {"h1": None}).why == {
        "h1": "cannot look: h1: unreachable"}
