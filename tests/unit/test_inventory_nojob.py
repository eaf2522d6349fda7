"""An inventory without `job:` (inventory/load.py, plan.py): its hosts serve one-off commands
(`tfctl run`, inventory/oneoff.py), and there is no job to plan, said in one sentence."""

from __future__ import annotations

import pytest

from tfctl.inventory import parse_inventory
from tfctl.inventory.errors import InventoryError
from tfctl.inventory.oneoff import Point, oneoff_plan
from tfctl.inventory.plan import make_plan


@pytest.mark.parametrize(("text", "line"), [
    ("# the lab's GPUs\nname: lab\nhosts: [{name: h1, gpus: [0]}]\n", 2),  # the first key's
    ("name: lab\nhosts: [{name: h1, gpus: [0]}]\njob:\n", 3),
    ("name: lab\njob: null\nhosts: [{name: h1, gpus: [0]}]\n", 2),
])
def test_an_inventory_without_a_job_serves_one_off_commands_only(text: str, line: int) -> None:
    inv = parse_inventory(text)
    assert not inv.job_written and inv.job.sync.enabled
    with pytest.raises(InventoryError) as refused:
        make_plan(inv)
    assert str(refused.value).startswith(f"cluster.yaml:{line}: job: there is no job")
    assert "tfctl run -- CMD" in str(refused.value)
    plan = oneoff_plan(inv, "h1", (0,), Point(("python", "x.py")), {})
    assert plan.tasks[0].argv == ("python3", "x.py")
