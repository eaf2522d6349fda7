"""Part of the lab: the inventory with only some of its hosts (`tfctl up --only/--exclude`).

Pure. The result is what the file would say with the other hosts' entries deleted, so the plan,
the sync, the setup, the launch and the run's recorded hosts all follow from it: `down` and
`status` later act on exactly the hosts the run used (they read them from the run's state).
What a left-out host carried is handled the way a person editing the file would: a chief there
moves to the first host kept (`job.chief` names a host; `chief: true` means the first one), an
evaluator or TensorBoard there is left out with it; each of those is said in a note. A
selection TensorFlow would refuse (say, a parameter-server job without its only ps host) is
refused with the rule's own sentence.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence

from tfctl.inventory.model import Inventory


class SelectionError(ValueError):
    """A selection that names no host of the inventory, keeps none, or breaks a rule."""


@dataclasses.dataclass(frozen=True)
class Selection:
    inventory: Inventory
    left_out: tuple[str, ...]
    notes: tuple[str, ...] = ()
    """What moved or was dropped with the left-out hosts, one sentence each."""


def split_names(values: Iterable[str]) -> list[str]:
    """`--only h1,h2 --only h3` → [h1, h2, h3] (blanks dropped, order kept, repeats once)."""
    names: list[str] = []
    for value in values:
        for name in value.split(","):
            name = name.strip()
            if name and name not in names:
                names.append(name)
    return names


def unknown_hosts(inv: Inventory, names: Sequence[str]) -> list[str]:
    known = {h.name for h in inv.hosts}
    return [n for n in names if n not in known]


def select_hosts(inv: Inventory, only: Sequence[str] = (), exclude: Sequence[str] = ()
                 ) -> Selection:
    """The inventory keeping `only` (all hosts when empty) less `exclude`, in file order.

    Raises `SelectionError` for a name that is not a host, for a selection that keeps no host,
    and for one TensorFlow's rules refuse (`rules.refusals`).
    """
    unknown = unknown_hosts(inv, [*only, *exclude])
    if unknown:
        raise SelectionError(f"{', '.join(map(repr, unknown))} "
                             f"{'is not a host' if len(unknown) == 1 else 'are not hosts'} of "
                             f"{inv.path}; its hosts are {', '.join(h.name for h in inv.hosts)}")
    kept = tuple(h for h in inv.hosts
                 if (not only or h.name in only) and h.name not in exclude)
    if not kept:
        raise SelectionError(f"that leaves no host of {inv.path} to run on "
                             f"(its hosts are {', '.join(h.name for h in inv.hosts)})")
    if len(kept) == len(inv.hosts):
        return Selection(inv, ())
    left_out = tuple(h.name for h in inv.hosts if h not in kept)
    names = {h.name for h in kept}
    job, notes = inv.job, []
    if job.chief is not None and job.chief not in names:
        notes.append(f"chief:0 moves from {job.chief} (left out) to {kept[0].name}")
        job = dataclasses.replace(job, chief=kept[0].name)
    if job.evaluator is not None and job.evaluator.host not in names:
        notes.append(f"the evaluator is left out with {job.evaluator.host}")
        job = dataclasses.replace(job, evaluator=None)
    if job.tensorboard is not None and job.tensorboard.host not in names:
        notes.append(f"TensorBoard is left out with {job.tensorboard.host}")
        job = dataclasses.replace(job, tensorboard=None)
    chosen = dataclasses.replace(inv, hosts=kept, job=job)
    _check_rules(chosen, left_out)
    return Selection(chosen, left_out, tuple(notes))


def _check_rules(inv: Inventory, left_out: Sequence[str]) -> None:
    from tfctl.inventory.plan import make_plan
    from tfctl.inventory.rules import refusals

    plan = make_plan(inv)
    found = refusals(plan)
    if found:
        hint = f" — {found[0].hint}" if found[0].hint else ""
        raise SelectionError(f"without {', '.join(left_out)}: {found[0].message}{hint}")
    if not plan.tasks:
        raise SelectionError(f"without {', '.join(left_out)} no task is left to run")
