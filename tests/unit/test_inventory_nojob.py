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


@pytest.mark.parametrize(("text", "line"), [
    ("name: lab\nhosts: [{name: h1, gpus: [0]}]\njob: {sync: {source: ./src}}\n", 3),
    ("name: lab\nhosts: [{name: h1, gpus: [0]}]\njob:\n  setup: [pip install -e .]\n"
     "  sync: {source: ./src, exclude: [data]}\n  script: null\n", 3),
    ("name: lab\nhosts: [{name: h1, gpus: [0]}]\njob: {}\n", 3),
])
def test_a_job_without_a_script_says_how_one_off_commands_run(text: str, line: int) -> None:
    """`job:` with no `script:` loads (`tfctl run` takes its sync and setup); `plan` and `up`
    refuse it with the loader's own words for a missing key."""
    inv = parse_inventory(text)
    assert inv.job_written and inv.job.script == ""
    with pytest.raises(InventoryError) as refused:
        make_plan(inv)
    assert str(refused.value) == (f"cluster.yaml:{line}: job.script: this key is required — "
                                  "add `script: train.py` (relative to the synced folder)")
    plan = oneoff_plan(inv, "h1", (0,), Point(("python", "x.py")), {})
    assert plan.tasks[0].argv == ("python3", "x.py")
    assert plan.inventory.job.sync == inv.job.sync and plan.inventory.job.setup == inv.job.setup
    if "./src" in text:
        assert inv.job.sync.source == "./src"


def test_a_job_without_a_script_is_still_checked_key_by_key() -> None:
    """Leaving the script out loosens nothing else: the job's other keys are checked as ever."""
    with pytest.raises(InventoryError) as refused:
        parse_inventory("name: lab\nhosts: [{name: h1}]\njob: {sync: {source: 3}}\n")
    assert "job.sync.source" in str(refused.value)
    with pytest.raises(InventoryError) as refused:
        parse_inventory("name: lab\nhosts: [{name: h1}]\njob: {chief: h9}\n")
    assert "job.chief: no host is named 'h9'" in str(refused.value)
