"""`RunController` holds one engine, chosen once from the current run: the Slurm job the state
file names (`up --on slurm`), else the hosts; a run starts on the engine `on` names. The choice
and the Slurm engine's refusals need no host: nothing here connects (tests/testbed/test_slurm.py
runs both engines for real)."""

from __future__ import annotations

import shutil
from pathlib import Path

import click
import pytest

from tfctl.inventory.errors import InventoryError
from tfctl.inventory.load import load_inventory
from tfctl.remote.controller import RunController, UpOptions
from tfctl.remote.engines.engine import EngineRefused
from tfctl.remote.engines.hosts import HostsEngine
from tfctl.remote.engines.slurm import SlurmEngine, job_from_state, remember_job
from tfctl.remote.errors import FleetError, GpusBusy
from tfctl.remote.runs.current import CurrentRun, read_state, remember, write_state

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "beyond-the-lab.yaml"
SLURM_STATE = {"run_id": "slurm-42", "engine": "slurm", "job_id": "42",
               "workdir": "/scratch/wd", "name": "digits", "style": "tf_config",
               "tasks": [["worker:0", "titan"], ["worker:1", "gtx970"]]}


@pytest.fixture
def inventory_path(tmp_path: Path) -> Path:
    path = tmp_path / "digits.yaml"
    shutil.copy(EXAMPLE, path)
    return path


def test_a_slurm_job_in_the_state_file_is_the_engine(inventory_path: Path) -> None:
    inv = load_inventory(inventory_path)
    remember_job(inv, job_from_state(SLURM_STATE), "slurm", ("titan", "gtx970"))
    with RunController(inv) as controller:
        engine = controller.engine()
        assert isinstance(engine, SlurmEngine) and engine.run_id == "slurm-42"
        assert controller.engine() is engine  # chosen once
        assert engine.tasks_on("gtx970") == {"worker:1"}


def test_a_run_on_the_hosts_in_the_state_file_is_the_hosts(inventory_path: Path) -> None:
    inv = load_inventory(inventory_path)
    remember(inv, "20260101-000000-abcd", ("titan",))
    with RunController(inv) as controller:
        assert isinstance(controller.engine(), HostsEngine)
        assert controller.current() == CurrentRun("20260101-000000-abcd", "state file",
                                                  ("titan",))


def test_a_run_chosen_with_dash_dash_run_is_the_hosts(inventory_path: Path) -> None:
    inv = load_inventory(inventory_path)
    write_state(inv, {**SLURM_STATE, "inventory": str(inv.path)})
    with RunController(inv) as controller:
        controller._run = CurrentRun("20260101-000000-abcd", "--run", ("titan",))
        assert isinstance(controller.engine(), HostsEngine)


@pytest.mark.parametrize("call", ["restart", "restart_task"])
def test_a_slurm_run_refuses_restart_as_the_fleet_not_a_host(inventory_path: Path,
                                                            call: str) -> None:
    inv = load_inventory(inventory_path)
    remember_job(inv, job_from_state(SLURM_STATE), "slurm", ("titan", "gtx970"))
    with RunController(inv) as controller, pytest.raises(EngineRefused) as refused:
        getattr(controller, call)("worker:0")
    assert isinstance(refused.value, FleetError) and refused.value.host == ""
    assert str(refused.value).startswith("a Slurm run's task")
    assert "up --on slurm" in str(refused.value)


@pytest.mark.parametrize("on", ["hosts", "lab"])
def test_up_starts_on_the_engine_on_names(inventory_path: Path, on: str) -> None:
    inv = load_inventory(inventory_path)
    with RunController(inv, on=on) as controller:  # `up --on hosts`, the default (or `lab`)
        rows = controller.start_steps(UpOptions())
        assert rows is not None and rows.hosts == ("titan", "gtx970")
        assert rows.steps[-1] == "gpus" and set(rows.launch_hosts) <= {"titan", "gtx970"}
        assert rows.task_hosts == {t.name: t.host for t in controller.plan.tasks}
    with RunController(inv, on="slurm") as controller:  # the submission is told in lines
        assert controller.start_steps(UpOptions()) is None
    with RunController(inv, on="k8s") as controller, pytest.raises(ValueError, match="hosts or "
                                                                                       "slurm"):
        controller.start_steps(UpOptions())


def test_up_on_takes_every_engines_name_and_no_other_word() -> None:
    from tfctl.remote.engines.choice import ON, ON_ALSO
    from tfctl.tui.cli.lifecycle import up

    on = next(p for p in up.params if p.name == "on")
    assert isinstance(on.type, click.Choice) and on.default == ON[0]
    assert set(on.type.choices) == {*ON, *ON_ALSO} and set(ON_ALSO.values()) <= set(ON)


def test_a_bad_slurm_host_is_refused_when_the_job_would_be_submitted(inventory_path: Path
                                                                     ) -> None:
    text = inventory_path.read_text().replace("slurm:", "slurm:\n  host: nowhere", 1)
    inventory_path.write_text(text)
    inv = load_inventory(inventory_path)
    with RunController(inv, on="slurm") as controller:
        assert controller.start_steps(UpOptions()) is None  # choosing the engine reads nothing
        with pytest.raises(InventoryError, match="no host named 'nowhere'"):
            controller.up(UpOptions(sync=False))
        assert controller.starting_run_id is None and read_state(inv) is None


def test_the_hosts_plan_an_inventory_without_free_gpus_as_it_is(inventory_path: Path) -> None:
    inv = load_inventory(inventory_path)
    with RunController(inv) as controller:
        engine = HostsEngine(controller.fleet, controller.current, lambda: controller.plan)
        said: list[str] = []
        assert engine.take_gpus(inv, said.append) == (inv, {}) and not said


def test_fleet_errors_name_no_host() -> None:
    busy = GpusBusy(("titan GPU 0: pid 7 (bob, 900 MiB)",), "titan: 1, 2")
    assert isinstance(busy, FleetError) and busy.host == "" and busy.kind == "gpus_busy"
    assert str(busy) == ("GPUs the plan assigns are in use or reserved by others: "
                         "titan GPU 0: pid 7 (bob, 900 MiB)")
