"""The rules a finished plan is held to: the roles and layouts its framework runs, then the
framework's own rules (TensorFlow's per `job.strategy`: frameworks/tensorflow/rules.py).

A refusal (`Refusal`) is a mistake the framework would make you find at run time; the loader
turns the first one into a located `InventoryError` (exit 2), and `up --only/--exclude` refuses a
part of the lab that breaks one. A warning is a plan that runs but wastes the lab; `make_plan`
puts the warnings on `Plan.warnings`, which `tfctl plan` prints.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tfctl.inventory.frameworks import framework_of
from tfctl.inventory.frameworks.interface import Framework, Refusal

if TYPE_CHECKING:
    from tfctl.inventory.tasks import Plan

__all__ = ["Refusal", "refusals", "warnings"]


def refusals(plan: Plan) -> list[Refusal]:
    """Every rule the plan breaks, in the order a reader should fix them."""
    framework = framework_of(plan.inventory.job)
    return [*_roles_refused(plan, framework), *framework.refusals(plan)]


def warnings(plan: Plan) -> tuple[str, ...]:
    """What runs but fails later or wastes the lab."""
    return framework_of(plan.inventory.job).warnings(plan)


def _roles_refused(plan: Plan, framework: Framework) -> list[Refusal]:
    """A parameter server, chief or evaluator the framework has no role for, or a worker
    layout it does not run."""
    inv, name = plan.inventory, framework.title
    found = []
    if "ps" not in framework.roles and any(h.ps for h in inv.hosts):
        keys = tuple(("hosts", i, "ps") for i, h in enumerate(inv.hosts) if h.ps)
        found.append(Refusal((*keys, ("hosts",)), f"{name} has no parameter servers",
                             "set `ps: 0` on every host"))
    if "chief" not in framework.roles and inv.job.chief is not None:
        found.append(Refusal((("job", "chief"),), f"{name} has no chief", "remove `chief:`"))
    if "evaluator" not in framework.roles and inv.job.evaluator is not None:
        found.append(Refusal((("job", "evaluator"),), f"{name} has no evaluator task",
                             "remove `evaluator:`"))
    if inv.job.workers not in framework.layouts:
        found.append(Refusal((("job", "workers"),), f"{name} does not run `workers: "
                             f"{inv.job.workers}`", "write `workers: " +
                             " or ".join(framework.layouts) + "`"))
    return found
