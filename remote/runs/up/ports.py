"""Ports chosen at `up`: what to ask each host, and the plan once the hosts have answered.

A task type whose port the inventory does not write (`Task.port_chosen_at_up`) keeps the
plan's port on a host where it is free and takes a free one of `job.port_range` where it is not
(the host decides, remote/agent/freeports.py). The client asks in `up`'s check, and again in
the second check where a host synced or ran its setup; then it hands the plan what the hosts
chose (`inventory.plan.with_ports`: the same tasks, each with what its framework writes from
the ports, e.g. the cluster spec, TF_CONFIG or the flags, handed again), so the manifests name
the ports the tasks will listen on, and the run's manifest records them. Ports
the inventory writes are checked free (`check.judge_ports`) and never moved.
"""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from tfctl.inventory.plan import Plan, with_ports
from tfctl.remote.connect.session import agentops
from tfctl.remote.errors import RemoteError

if TYPE_CHECKING:
    from tfctl.remote.connect.fleet import Fleet

Raw = Mapping[str, Any]


class NoFreePort(RemoteError):
    """Every port of `job.port_range` is taken on a host, for some task of the run."""

    def __init__(self, host: str, tasks: list[str], low: int, high: int):
        super().__init__(host, f"no free port left in job.port_range {low}-{high} for "
                               f"{', '.join(tasks)}: widen job.port_range, or write the ports "
                               "under job.ports", kind="launch")


def new_token() -> str:
    """One `up`'s lease token: its two checks keep the ports the first one leased."""
    return secrets.token_hex(8)


def fixed_ports(plan: Plan, host: str) -> list[int]:
    """The ports `host`'s tasks take as written (checked free, never moved)."""
    return sorted({t.port for t in plan.on_host(host)
                   if t.port is not None and not t.port_chosen_at_up})


def ask(plan: Plan, host: str, token: str | None) -> dict[str, Any] | None:
    """The `choose` request for `host` (None: none of its tasks' ports is chosen at up)."""
    tasks = [{"task": t.name, "preferred": t.port} for t in plan.on_host(host)
             if t.port_chosen_at_up and t.port is not None]
    if not tasks:
        return None
    low, high = plan.inventory.job.ports.free_range
    return {"tasks": tasks, "range": [low, high], "fixed": fixed_ports(plan, host),
            "token": token}


def chosen_plan(plan: Plan, answers: Mapping[str, Raw | None]) -> Plan:
    """`plan` with the ports each host chose (`answers`: host → `choose_ports`' answer);
    `NoFreePort` where a host had none left for a task."""
    low, high = plan.inventory.job.ports.free_range
    chosen: dict[str, int] = {}
    for host, answer in answers.items():
        if answer is None:
            continue
        if answer.get("short"):
            raise NoFreePort(host, [str(t) for t in answer["short"]], low, high)
        chosen.update({str(k): int(v) for k, v in (answer.get("chosen") or {}).items()})
    return with_ports(plan, chosen)


def moved(before: Plan, after: Plan) -> list[str]:
    """`task port→port` for each task whose port `up` took other than the plan's."""
    return [f"{t.name} {t.port}→{after.task(t.name).port}" for t in before.tasks
            if t.port_chosen_at_up and after.task(t.name).port != t.port]


def chosen_ports(plan: Plan, host: str) -> list[int]:
    """The ports of `host`'s tasks that were chosen at up (verified again at the start)."""
    return sorted({t.port for t in plan.on_host(host)
                   if t.port_chosen_at_up and t.port is not None})


def release_leases(fleet: Fleet, hosts: Sequence[str], token: str) -> None:
    """Free again the ports an `up` that did not start leased (best effort: a lease that stays
    ends by itself after two minutes)."""
    def release(t: Any) -> None:
        with contextlib.suppress(RemoteError, OSError):
            agentops.release_ports(t, token)

    with contextlib.suppress(RemoteError, OSError):
        fleet.map(release, list(hosts))
