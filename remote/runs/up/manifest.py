"""What a host's run directory records of a run (`manifest.json`): the run's rules and each of
the host's tasks, as `up` sends them to the host's agent (remote/agent/supervisor.py starts
them)."""

from __future__ import annotations

from typing import Any

from tfctl.inventory.plan import Plan, Task
from tfctl.inventory.session import session_of
from tfctl.remote.runs.endrule import deciders, end_rule


def task_manifest(task: Task, plan: Plan) -> dict[str, Any]:
    restart = plan.inventory.job.restart
    data = task.to_json()
    data["restart"] = {"policy": restart.for_type(task.type), "max": restart.max,
                       "backoff_s": restart.backoff_s,
                       "together": restart.together and task.type in ("worker", "chief")}
    data["log_max_bytes"] = plan.inventory.job.log_max_bytes
    data["session"] = session_of(plan.oneoff)
    return data


def host_manifest(plan: Plan, host: str, run_id: str, start_timeout_s: float
                  ) -> dict[str, Any]:
    """What a host's run directory records of the run (`manifest.json`): its tasks and rules;
    a one-off command's run (`tfctl run`) also its `oneoff` record, which lets it start beside
    the workdir's other live runs (agent runops.py `op_prepare`) and which `tfctl runs` shows,
    and `session`, the session it is ("notebook", "shell"; "" for none: inventory/session.py),
    which each task's record carries too."""
    manifest = {"run_id": run_id, "inventory": plan.inventory.name, "host": host,
                "style": plan.inventory.job.style, "outputs": list(plan.inventory.job.outputs),
                "throughput_patterns": list(plan.inventory.job.throughput),
                "end": end_rule(plan, start_timeout_s), "notify": notify_ask(plan, host),
                "tasks": [task_manifest(x, plan) for x in plan.on_host(host)]}
    if plan.oneoff is not None:
        manifest["oneoff"] = dict(plan.oneoff)
        manifest["session"] = session_of(plan.oneoff)
    else:  # whose job it is (`tfctl runs` says it): a one-off command has no framework
        manifest["framework"] = plan.inventory.job.framework
    return manifest


def notify_ask(plan: Plan, host: str) -> dict[str, str | None] | None:
    """`job.notify` for the host that sends it (agent notify.py): the host of the first task
    whose end is the job's (the chief, else worker 0), whose watcher knows its exit status."""
    notify = plan.inventory.job.notify
    if notify is None:
        return None
    decide, _mode = deciders(plan)
    sender = decide[0].host if decide else plan.hosts_used[0]
    return {"command": notify.command, "webhook": notify.webhook} if host == sender else None
