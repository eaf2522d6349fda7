"""An inventory without `job:` (inventory/load.py, plan.py): its hosts serve one-off commands
(`tfctl run`, inventory/oneoff.py), and there is no job to plan, said in one sentence."""

from __future__ import annotations

import pytest

from tfctl.inventory import parse_inventory
from tfctl.inventory.errors import InventoryError
from tfctl.inventory.oneoff import Point, oneoff_plan
from tfctl.inventory.plan import make_plan


def test_an_inventory_without_a_job_serves_one_off_commands_only() -> None:
    inv = parse_inventory("name: lab\nhosts: [{name: h1, gpus: [0]}]\n")
    assert not inv.job_written and inv.job.sync.enabled
    with pytest.raises(InventoryError) as refused:
        make_plan(inv)
    assert "there is no `job:` section" in str(refused.value)
    assert "tfctl run -- CMD" in str(refused.value)
    plan = oneoff_plan(inv, "h1", (0,), Point(("python", "x.py")), {})
    assert plan.tasks[0].argv == ("python3", "x.py")
