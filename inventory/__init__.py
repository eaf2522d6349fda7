"""The inventory floor: the cluster file, what follows from it, and nothing that touches a host.

Pure code only (stdlib, PyYAML, pydantic): `load` reads and validates a `cluster.yaml`,
`plan` turns the resulting `Inventory` into every task's exact command line.

The names below are imported on first use (PEP 562), so that `tfctl.inventory.model`, which
every layer reads, does not pull in pydantic and PyYAML (~100 ms) on the paths that need only
the records (a cached inventory, see `cache.py`).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tfctl.inventory.errors import InventoryError
    from tfctl.inventory.load import load_inventory, parse_inventory
    from tfctl.inventory.model import Evaluator, Host, Inventory, Job, TensorBoard
    from tfctl.inventory.plan import Plan, Task, make_plan

_HOME = {
    "InventoryError": "errors",
    "load_inventory": "load",
    "parse_inventory": "load",
    "Evaluator": "model",
    "Host": "model",
    "Inventory": "model",
    "Job": "model",
    "TensorBoard": "model",
    "Plan": "plan",
    "Task": "plan",
    "make_plan": "plan",
}

__all__ = [
    "Evaluator",
    "Host",
    "Inventory",
    "InventoryError",
    "Job",
    "Plan",
    "Task",
    "TensorBoard",
    "load_inventory",
    "make_plan",
    "parse_inventory",
]


def __getattr__(name: str) -> Any:
    if name not in _HOME:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_HOME[name]}"), name)
