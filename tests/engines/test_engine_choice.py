"""`RunController` holds one engine, chosen once from the current run: the Slurm job the state
file names (`up --on slurm`), else the lab's hosts. The choice and the Slurm engine's refusals
need no host: nothing here connects (tests/testbed/test_slurm.py runs both engines for real)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tfctl.inventory.load import load_inventory
from tfctl.remote.engines.slurm_run import SlurmRun, job_from_state, remember_job
from tfctl.remote.errors import FleetError, GpusBusy
from tfctl.remote.runs.controller import RunController
from tfctl.remote.runs.current import CurrentRun, remember, state_path
from tfctl.remote.runs.engine import EngineRefused
from tfctl.remote.runs.labengine import LabEngine

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
        assert isinstance(engine, SlurmRun) and engine.run_id == "slurm-42"
        assert controller.engine() is engine  # chosen once
        assert engine.tasks_on("gtx970") == {"worker:1"}


def test_a_lab_run_in_the_state_file_is_the_labs(inventory_path: Path) -> None:
    inv = load_inventory(inventory_path)
    remember(inv, "20260101-000000-abcd", ("titan",))
    with RunController(inv) as controller:
        assert isinstance(controller.engine(), LabEngine)
        assert controller.current() == CurrentRun("20260101-000000-abcd", "state file",
                                                  ("titan",))


def test_a_run_chosen_with_dash_dash_run_is_the_labs(inventory_path: Path) -> None:
    inv = load_inventory(inventory_path)
    Path(state_path(inv)).write_text(json.dumps({**SLURM_STATE, "inventory": str(inv.path)}))
    with RunController(inv) as controller:
        controller._run = CurrentRun("20260101-000000-abcd", "--run", ("titan",))
        assert isinstance(controller.engine(), LabEngine)


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


def test_fleet_errors_name_no_host() -> None:
    busy = GpusBusy(("titan GPU 0: pid 7 (bob, 900 MiB)",), "titan: 1, 2")
    assert isinstance(busy, FleetError) and busy.host == "" and busy.kind == "gpus_busy"
    assert str(busy) == ("GPUs the plan assigns are in use or reserved by others: "
                         "titan GPU 0: pid 7 (bob, 900 MiB)")
