"""Checks that need the derived plan: two tasks on one host must never share a port."""

from __future__ import annotations

from tfctl.inventory.errors import ErrorFactory
from tfctl.inventory.model import Inventory
from tfctl.inventory.yamlmarks import PathKey


def check_ports(inv: Inventory, error: ErrorFactory) -> None:
    """Raise a located error when two tasks of the plan would listen on one port of one host."""
    from tfctl.inventory.plan import make_plan

    plan = make_plan(inv)
    for host in inv.hosts:
        used: dict[int, str] = {}
        for task in plan.on_host(host.name):
            if task.port is None:
                continue
            if task.port in used:
                other = used[task.port]
                raise error(_clash_key(task.type, other), f"on host {host.name!r}, {other} and "
                            f"{task.name} would both listen on port {task.port}",
                            _clash_hint(inv, host.name, task.type, other))
            used[task.port] = task.name


def _clash_key(task_type: str, other: str) -> PathKey:
    if task_type == "tensorboard" or other.startswith("tensorboard"):
        return ("job", "tensorboard", "port")
    return ("job", "ports", task_type if task_type != "ps" else "worker")


def _clash_hint(inv: Inventory, host: str, task_type: str, other: str) -> str:
    first_ps = inv.job.ports.ps
    n_ps = inv.host(host).ps
    if {task_type, other.split(":")[0]} == {"ps", "worker"} and first_ps is not None:
        return (f"this host runs {n_ps} ps on ports {first_ps}..{first_ps + n_ps - 1}: "
                f"set job.ports.worker to {first_ps + n_ps} or higher")
    return "give each task type its own port range under job.ports (and job.tensorboard.port)"
