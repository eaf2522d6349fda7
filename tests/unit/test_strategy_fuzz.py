"""Generated labs under every strategy: each file plans, or is refused with one located line
(the line is where the named key, or its nearest written parent, sits), never a traceback."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.inventory_oracle import assert_cli_agrees, expected_line, key_lines
from tfctl.inventory import InventoryError, load_inventory, make_plan

STRATEGIES = ["flags", "parameter_server", "multi_worker_mirrored", "mirrored", "custom", None]


@st.composite
def labs(draw: st.DrawFn) -> dict[str, Any]:
    names = draw(st.lists(st.sampled_from(["titan", "gtx970", "cpubox", "k80", "v100"]),
                          min_size=1, max_size=4, unique=True))
    hosts = []
    for name in names:
        host: dict[str, Any] = {"name": name}
        host.update(draw(st.fixed_dictionaries({}, optional={
            "gpus": st.one_of(st.integers(0, 4), st.lists(st.integers(0, 7), unique=True,
                                                           min_size=1, max_size=4)),
            "ps": st.integers(0, 2), "cpu_workers": st.integers(1, 2),
            "args": st.lists(st.sampled_from(["--batch_size=16", "--x"]), max_size=2)})))
        hosts.append(host)
    job: dict[str, Any] = {"script": "train.py",
                           "ports": {"ps": 2222, "worker": 3000, "chief": 2220}}
    job.update(draw(st.fixed_dictionaries({}, optional={
        "strategy": st.sampled_from(STRATEGIES),
        "style": st.sampled_from(["tf_config", "flags"]),
        "workers": st.sampled_from(["per_gpu", "per_host"]),
        "chief": st.one_of(st.booleans(), st.sampled_from(names)),
        "task_args": st.fixed_dictionaries({}, optional={"worker": st.just(["--w"]),
                                                         "chief": st.just(["--c"])}),
        "task_env": st.fixed_dictionaries({}, optional={"ps": st.just({"A": "1"})}),
    })))
    if draw(st.booleans()):
        job["ports"][draw(st.sampled_from(["ps", "worker", "chief"]))] = "none"
    return {"name": "lab", "hosts": hosts, "job": job}


@pytest.fixture(scope="module")
def lab_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("strategy-fuzz")


@settings(max_examples=300, deadline=None, database=None)
@given(doc=labs())
def test_every_generated_lab_plans_or_is_refused_where_it_says(doc: dict[str, Any],
                                                               lab_dir: Path) -> None:
    text = yaml.safe_dump(doc, sort_keys=False)
    path = lab_dir / "lab.yaml"
    path.write_text(text)
    try:
        plan = make_plan(load_inventory(path))
    except InventoryError as error:
        assert error.line == expected_line(error.key_path, key_lines(text)), str(error)
        assert error.hint, str(error)
        assert_cli_agrees(path, error)
        return
    strategy = doc["job"].get("strategy")
    if strategy == "mirrored":
        assert plan.cluster == {} and all(t.port is None for t in plan.tasks)
    if strategy in ("multi_worker_mirrored", "mirrored"):
        assert not any(t.type == "ps" for t in plan.tasks)
    assert_cli_agrees(path, None)
