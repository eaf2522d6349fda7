"""The inventory floor: the cluster file, what follows from it, and nothing that touches a host.

Pure code only (stdlib, PyYAML, pydantic): `load` reads and validates a `cluster.yaml`,
`plan` turns the resulting `Inventory` into every task's exact command line.
"""

from tfctl.inventory.errors import InventoryError
from tfctl.inventory.load import load_inventory, parse_inventory
from tfctl.inventory.model import Evaluator, Host, Inventory, Job, TensorBoard
from tfctl.inventory.plan import Plan, Task, make_plan

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
