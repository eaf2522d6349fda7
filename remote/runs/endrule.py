"""The end of a job, as data: which tasks' end is the job's end, and what to stop then.

Pure. `launch` writes it into every host's manifest, where the host's watcher
(`remote/agent/watch.py`) applies it with no client connected; `status` applies the same rule
when a client looks. TensorFlow's own rules decide it (docs/strategy-rules.md):

- a chief exists (ParameterServerStrategy's coordinator, or MultiWorkerMirrored's chief): its
  end is the job's end;
- the flags style: worker 0 is the chief in practice (it initialises and saves);
- a job of ranks (torch, jax: `Framework.one_group`, inventory/frameworks/ranks.py), mode
  `group`: rank 0's end, or any rank's failure (no restart left), since the group cannot go on
  without one of its ranks; a rank's failure is seen on its own host (its exit record), rank
  0's end on every host (its port), and a host that sees a rank fail stops its other ranks at
  once;
- otherwise (MultiWorkerMirrored without a chief, mirrored, custom): every worker has ended.

Only a refusal on a remote decider's port counts toward its end; silence (no answer) ends a
host's part only once it has lasted `job.silence_window` (`silence_window_s`).

What serves and never ends by itself is stopped at the end: parameter servers, and the workers
of a job with parameter servers and a chief (ParameterServerStrategy's workers only run
`server.join()`); the other workers and the evaluator get a grace to end by themselves.
"""

from __future__ import annotations

import os
from typing import Any

from tfctl.inventory.frameworks import framework_of
from tfctl.inventory.plan import Plan, Task

TENSORBOARD_GRACE_S = 300.0


def deciders(plan: Plan) -> tuple[list[Task], str]:
    """The tasks whose end is the job's end, and `any` (one of them), `all`, or `group` (the
    first one's end, or any one's failure: the ranks of one process group, rank 0 first)."""
    chiefs = [t for t in plan.tasks if t.type == "chief"]
    if chiefs:
        return chiefs, "any"
    workers = [t for t in plan.tasks if t.type == "worker"]
    if framework_of(plan.inventory.job).one_group:
        return sorted(workers, key=lambda t: t.index), "group"
    if plan.inventory.job.style == "flags" and workers:
        return [next(t for t in workers if t.index == 0)], "any"
    return workers, "all"


def _closed_for_good_default() -> float:
    """20 s: longer than a task's port stays closed while it starts. `TFCTL_CLOSED_FOR_GOOD_S`
    (a positive number of seconds, read once per command) shortens it where nothing restarts
    slowly, as in the lab tests that wait for a job's end on every host; anything else in it is
    ignored."""
    try:
        value = float(os.environ.get("TFCTL_CLOSED_FOR_GOOD_S") or "nan")
    except ValueError:
        return 20.0
    return value if 0 < value < 3600 else 20.0


CLOSED_FOR_GOOD_S = _closed_for_good_default()
RESTART_ALLOWANCE_S = 90.0  # a restart: peers stopping (MultiWorkerMirrored), TF's import, listen


def closed_for_good_s(plan: Plan, task: Task) -> float:
    """How long another host must see the task's port closed before it believes the task has
    ended: longer when the task restarts (its port closes while it does)."""
    restart = plan.inventory.job.restart
    if restart.for_type(task.type) == "never" or restart.max == 0:
        return CLOSED_FOR_GOOD_S
    return CLOSED_FOR_GOOD_S + restart.backoff_s + RESTART_ALLOWANCE_S


def serving_types(plan: Plan) -> list[str]:
    """Stopped at once at the end. The evaluator is not: like a worker it gets a grace to
    finish its last evaluation (it sees the final checkpoint and ends by itself)."""
    types = ["ps"]
    if any(t.type == "chief" for t in plan.tasks) and any(t.type == "ps" for t in plan.tasks):
        types.append("worker")
    return types


def end_rule(plan: Plan, start_timeout_s: float) -> dict[str, Any]:
    tasks, mode = deciders(plan)
    tensorboard = plan.inventory.job.tensorboard
    return {
        "mode": mode,
        "deciders": [{"name": t.name, "host": t.host, "address": t.address, "port": t.port,
                      "closed_for_good_s": closed_for_good_s(plan, t)} for t in tasks],
        "serving": serving_types(plan),
        "start_timeout_s": start_timeout_s,
        "silence_window_s": plan.inventory.job.silence_window_s,
        "tensorboard": {
            "keep": tensorboard.keep if tensorboard else False,
            "grace_s": tensorboard.grace_s if tensorboard else TENSORBOARD_GRACE_S,
        },
    }
