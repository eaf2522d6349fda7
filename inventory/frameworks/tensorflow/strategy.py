"""TensorFlow's `job.strategy` resolved: the style it implies, the defaults it changes, the keys
it forbids.

Runs in the loader on the validated schema, where it can still tell a key that was written from
one that was left to its default (`ps: 1` written under multi_worker_mirrored is a mistake; the
default is 0 there). The rules that need the whole plan (device counts, a chief, parameter
servers) are in `rules.py` beside it. A file without `strategy:` is planned by its `style` alone: no
default changed, no key forbidden.
"""

from __future__ import annotations

from tfctl.inventory import model, schema
from tfctl.inventory.errors import ErrorFactory

# Strategies whose variables live on the workers: no parameter server by default, none allowed.
NO_PS = ("multi_worker_mirrored", "mirrored")
_HANDS = {
    "flags": "passes --ps_hosts/--worker_hosts/--job_name/--task_index",
    "tf_config": "hands every task its TF_CONFIG",
    "none": "hands its processes no cluster at all",
}
_WHY_NO_PS = {
    "multi_worker_mirrored": "MultiWorkerMirroredStrategy mirrors every variable on every "
                             "worker and accepts only chief, worker and evaluator tasks: a ps "
                             "task running the script fails with a ValueError",
    "mirrored": "MirroredStrategy keeps the variables on the host's own GPUs: a ps task here "
                "would serve nothing",
}


def resolve_style(job: schema.JobSpec, error: ErrorFactory) -> model.Style:
    """The style `strategy` implies; a written `style` that says otherwise is refused."""
    if job.strategy is None:
        return job.style or "tf_config"
    implied = model.STRATEGY_STYLE[job.strategy]
    if job.style is not None and job.style != implied:
        raise error(("job", "style"),
                    f"`style: {job.style}` contradicts `strategy: {job.strategy}`, which "
                    f"{_HANDS[implied]}",
                    f"remove `style:` (strategy {job.strategy} decides it)")
    return implied


def resolve_workers(job: schema.JobSpec, error: ErrorFactory) -> model.WorkerLayout:
    """per_gpu unless written; mirrored is one process per host, so only per_host fits it."""
    if job.strategy != "mirrored":
        return job.workers or "per_gpu"
    if job.workers == "per_gpu":
        raise error(("job", "workers"),
                    "strategy mirrored runs one process per host on all of its GPUs, "
                    "not one per GPU",
                    "remove `workers:` (or use `strategy: multi_worker_mirrored` for one "
                    "synchronous worker per GPU)")
    return "per_host"


def host_ps(i: int, host: schema.HostSpec, strategy: str | None, error: ErrorFactory) -> int:
    """A host's parameter servers: 0 by default where the strategy has none, else 1."""
    if host.ps is None:
        return 0 if strategy in NO_PS else 1
    if host.ps > 0 and strategy in NO_PS:
        raise error(("hosts", i, "ps"),
                    f"strategy {strategy} has no parameter servers ({_WHY_NO_PS[strategy]})",
                    "remove `ps:` (it is 0 with this strategy), or use "
                    "`strategy: parameter_server`")
    return host.ps


def check_host(i: int, host: schema.HostSpec, strategy: str | None,
               error: ErrorFactory) -> None:
    """Per-host keys a strategy cannot honour."""
    if strategy == "mirrored" and host.cpu_workers > 1:
        raise error(("hosts", i, "cpu_workers"),
                    "strategy mirrored runs one process per host",
                    "remove `cpu_workers:` (MirroredStrategy uses the host's CPU as one device)")


def check_chief(job: schema.JobSpec, error: ErrorFactory) -> None:
    """mirrored processes never meet, so none of them can be a chief."""
    if job.strategy == "mirrored" and job.chief is not False:
        raise error(("job", "chief"),
                    "strategy mirrored runs one independent process per host: there is no chief",
                    "remove `chief:` (or use `strategy: multi_worker_mirrored`, where the chief "
                    "is worker-like and trains with the others)")


def resolve_ports(job: schema.JobSpec, error: ErrorFactory) -> model.Ports:
    """`ports.<type>: none` (or null) means that type opens no port; only `custom` may say so,
    since every other strategy's tasks connect to each other's ports (mirrored opens none).
    A type `ports:` does not write keeps its usual first port in the plan, and `up` may take a
    free one of `job.port_range` for it on a host where that is taken (`chosen_at_up`)."""
    if job.strategy == "mirrored":
        return model.Ports(None, None, None)
    written = job.ports.model_fields_set
    values: dict[str, int | None] = {}
    for task_type in ("ps", "worker", "chief"):
        value = getattr(job.ports, task_type)
        if isinstance(value, int):
            values[task_type] = value
            continue
        if job.strategy != "custom":
            raise error(("job", "ports", task_type),
                        f"a {task_type} task without a port cannot be reached by the rest of "
                        "the cluster",
                        f"write a port number, e.g. `{task_type}: "
                        f"{getattr(model.Ports(), task_type)}` (only `strategy: custom` may "
                        "leave a task type without one)")
        values[task_type] = None
    chosen = tuple(t for t in ("ps", "worker", "chief") if t not in written)
    return model.Ports(**values, chosen_at_up=chosen, free_range=schema.port_range(job.port_range))
