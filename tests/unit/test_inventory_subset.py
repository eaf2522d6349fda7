"""`tfctl.inventory.subset`: the inventory with only some of its hosts (`up --only/--exclude`)."""

from __future__ import annotations

import pytest

from tests.support.inventories import PS_JOB
from tfctl.inventory.load import parse_inventory
from tfctl.inventory.plan import make_plan
from tfctl.inventory.subset import SelectionError, select_hosts, split_names


def test_split_names_takes_commas_and_repeats() -> None:
    assert split_names(["h1,h2", " h3 ", "h1", ""]) == ["h1", "h2", "h3"]


def test_only_and_exclude_keep_file_order_and_the_plan_follows() -> None:
    inv = parse_inventory(PS_JOB, "lab.yaml")
    chosen = select_hosts(inv, only=["h2", "h1"])
    assert [h.name for h in chosen.inventory.hosts] == ["h1", "h2"]
    assert chosen.left_out == ("h3",)
    plan = make_plan(chosen.inventory)
    assert set(plan.hosts_used) == {"h1", "h2"}
    assert plan.cluster["worker"] == ["h1:2223", "h1:2224", "h2:2223"]
    assert select_hosts(inv).inventory is inv  # nothing left out: the inventory itself


def test_what_left_out_hosts_carried_moves_or_goes_with_a_note() -> None:
    inv = parse_inventory(PS_JOB, "lab.yaml")
    chosen = select_hosts(inv, exclude=["h2", "h3"])
    job = chosen.inventory.job
    assert job.chief == "h1" and job.evaluator is None and job.tensorboard is None
    assert chosen.notes == ("chief:0 moves from h2 (left out) to h1",
                            "the evaluator is left out with h3", "TensorBoard is left out with h3")
    assert {t.name for t in make_plan(chosen.inventory).tasks} == {
        "ps:0", "worker:0", "worker:1", "chief:0"}


def test_a_selection_tensorflow_would_refuse_is_refused_with_the_rule() -> None:
    inv = parse_inventory(PS_JOB, "lab.yaml")
    with pytest.raises(SelectionError, match=r"without h1: .*(ps|parameter server)"):
        select_hosts(inv, exclude=["h1"])  # its only parameter server
