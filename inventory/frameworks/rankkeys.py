"""A job of ranks (torch, jax: ranks.py) as the loader resolves it: what only TensorFlow has is
refused where it is written; rank 0's port; the worker layout.

Runs in the loader on the validated schema, like TensorFlow's `tensorflow/strategy.py`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tfctl.inventory import model, schema

if TYPE_CHECKING:
    from tfctl.inventory.errors import ErrorFactory


def check_job(job: schema.JobSpec, title: str, error: ErrorFactory) -> None:
    """Refuse, where it is written, what only TensorFlow has."""
    coordinator = "rank 0 (worker:0, on the first host) is its coordinator"
    if job.strategy is not None:
        raise error(("job", "strategy"), f"`strategy:` is TensorFlow's: a {title} job is one "
                    f"process group, and {coordinator}", "remove `strategy:`")
    if job.style is not None:
        raise error(("job", "style"), f"`style:` is how TensorFlow's tasks learn the cluster: "
                    f"{title}'s ranks are handed their environment", "remove `style:`")
    if job.chief is not False:
        raise error(("job", "chief"), f"a {title} job has no chief: {coordinator}",
                    "remove `chief:` (rank 0 saves, by convention of the script)")
    if job.keras == "legacy":
        raise error(("job", "keras"), "`keras: legacy` is tf_keras under TensorFlow, which a "
                    f"{title} job does not run", "remove `keras:`")
    written = job.ports.model_fields_set
    for task_type in ("ps", "chief"):
        if task_type in written:
            raise error(("job", "ports", task_type), f"a {title} job opens one port, rank "
                        "0's, which the other ranks connect to", "write `ports: {worker: N}` "
                        "for rank 0's port, or leave it out for `up` to choose a free one")
    if not isinstance(job.ports.worker, int):
        raise error(("job", "ports", "worker"), "the other ranks connect to rank 0's port",
                    "write a port number, or leave `worker:` out for `up` to choose one")


def host_ps(i: int, host: schema.HostSpec, title: str, error: ErrorFactory) -> int:
    """0: a written `ps:` above it is refused where it is written."""
    if host.ps:
        raise error(("hosts", i, "ps"), f"{title} has no parameter servers: every process "
                    "is a rank of one group", "remove `ps:`")
    return 0


def resolve_workers(job: schema.JobSpec, default: model.WorkerLayout) -> model.WorkerLayout:
    return job.workers or default


def resolve_ports(job: schema.JobSpec) -> model.Ports:
    """Rank 0's port is `ports.worker`; chosen at up unless the file writes it."""
    chosen = () if "worker" in job.ports.model_fields_set else ("worker",)
    worker = job.ports.worker if isinstance(job.ports.worker, int) else model.Ports().worker
    return model.Ports(None, worker, None, chosen_at_up=chosen,
                       free_range=schema.port_range(job.port_range))
