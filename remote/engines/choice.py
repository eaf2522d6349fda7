"""Which engine: the one a new run starts on (`up --on hosts|slurm`), and the one the current run
is on (the state file says whether it is a Slurm job). Chosen here, once, so that the
controller and the front ends above it only ever call the `Engine` interface.
"""

from __future__ import annotations

from collections.abc import Callable

from tfctl.inventory.plan import Plan
from tfctl.remote.connect.fleet import Fleet
from tfctl.remote.engines.engine import Engine
from tfctl.remote.engines.hosts import HostsEngine
from tfctl.remote.runs.current import CurrentRun

Current = Callable[[bool], CurrentRun | None]
ON = ("hosts", "slurm")
"""The engines' names, `up --on`'s words: `hosts`, the inventory's hosts; `slurm`, one Slurm
job submitted as the inventory's `slurm:` says."""
ON_ALSO = {"lab": "hosts"}
"""Other words `up --on` takes, each for an engine of `ON`: `lab` is the hosts too (the shared
lab, `remote/lab/`, is the claims, reservations and queue over them, no engine)."""


def engine_named(on: str) -> str:
    """The engine's name in `ON` for a word `up --on` takes (`lab` → `hosts`)."""
    return ON_ALSO.get(on, on)


def queue_refusal(on: str) -> str | None:
    """Why `up --when-free` (tfctl's queue, which waits for the hosts' GPUs to be free) does not
    go with engine `on`, or None where it does: a scheduler's engine queues its jobs itself."""
    if engine_named(on) == "slurm":
        return "Slurm queues the job itself until its nodes are free: `tfctl up --on slurm`"
    return None


def engine_to_start(on: str, fleet: Fleet, current: Current, plan: Callable[[], Plan]) -> Engine:
    """The engine `up --on <on>` starts a run on; `current(refresh)` and `plan()` are the
    controller's run and plan, which the hosts' engine reads."""
    on = engine_named(on)
    if on == "slurm":
        from tfctl.remote.engines.slurm import SlurmEngine  # its modules: only where chosen

        return SlurmEngine(fleet.inventory, fleet.options)
    if on == "hosts":
        return HostsEngine(fleet, current, plan)
    raise ValueError(f"no engine named {on!r}: {' or '.join(ON)}")


def engine_of_run(fleet: Fleet, current: Current, plan: Callable[[], Plan],
                  by_id: bool = False) -> Engine:
    """The engine the current run is on: the Slurm job the state file names (`up --on slurm`),
    else the hosts; a run chosen by its id (`--run`, which the hosts list) is the hosts'."""
    from tfctl.remote.engines.slurm import SlurmEngine

    slurm = None if by_id else SlurmEngine.remembered(fleet.inventory, fleet.options)
    return slurm or HostsEngine(fleet, current, plan)
