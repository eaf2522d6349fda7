"""Inventory → Plan: every task of the job with its host, port, device mask, env and argv.

Pure and deterministic. What `tfctl plan --json` prints is exactly what `launch` executes, so the
dashboard and the remote layer never build a command line themselves.

The job's framework (`inventory/frameworks/`, TensorFlow's today) places the processes (which
roles on which host, their ports and masks) and hands each its place in the cluster (env and
args, e.g. TF_CONFIG); this module gives every task the rest, the same for every framework:

- env: the framework's base env, then `defaults.env` and the host's `env`, then `job.task_env`
  of the task's type; the mask (CUDA_VISIBLE_DEVICES) and what the framework hands are tfctl's
  and win over all of them;
- argv: the host's `python`, `job.script` (the evaluator: its own script and args), `job.args`,
  the host's `args`, `job.task_args` of the task's type, then the framework's args;
- TensorBoard (`job.tensorboard`), started after the framework's roles and handed nothing.

The framework's rules are checked on the finished plan (`rules.py`): the loader refuses what
they forbid, and their warnings ride on `Plan.warnings`.

The ports a plan names are those of a host nobody else runs a job on: for a type whose port the
file does not write, `up` asks each host which of them are free and takes a free port of
`job.port_range` in place of a taken one (two runs share a host), then hands the plan those
ports (`with_ports`), so the cluster and every task's env and args name the ports the tasks
will really listen on.

The cluster names each host as the other hosts reach it, which is not always how this client's
ssh does: an `address` that is an ~/.ssh/config alias means nothing on the hosts. So a host's
`cluster_address` wins; else `reach`, when the caller gives one, turns the host into the name
its ssh config resolves (the CLI and RunController pass `remote/connect/clusteraddr.py`,
OpenSSH's HostName; this module reads no ssh config itself); else the address as written.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping

from tfctl.inventory import rules
from tfctl.inventory.frameworks import framework_of
from tfctl.inventory.frameworks.interface import (  # host_port: callers import it from here
    Cluster,
    Framework,
    Handed,
    host_port,
)
from tfctl.inventory.model import SCRIPT_HINT, Host, Inventory
from tfctl.inventory.tasks import COMMON_ENV, Place, Plan, Task, TaskType

__all__ = ["Plan", "Reach", "Task", "TaskType", "host_port", "make_plan", "with_ports"]

Reach = Callable[[Host], str]
"""A host → the name the other hosts reach it by (its ssh config's HostName, say)."""


def make_plan(inv: Inventory, reach: Reach | None = None) -> Plan:
    """The plan of `inv`; `reach` names the hosts in the cluster (module docstring).
    `InventoryError` for a file without `job:`, or with a `job:` without `script:`: either
    serves one-off commands (`tfctl run`) only."""
    if not inv.job_written or not inv.job.script:
        from tfctl.inventory.errors import InventoryError

        if inv.job_written:
            raise InventoryError(inv.path, inv.job_line, "job.script", "this key is required",
                                 SCRIPT_HINT)
        raise InventoryError(inv.path, inv.job_line, "job", "there is no job (`job:` is missing or "
                             "empty), so nothing to plan or start",
                             "add one (at least `job: {script: train.py}`), "
                             "or run a command on the hosts with `tfctl run -- CMD`")
    framework = framework_of(inv.job)
    addresses = cluster_addresses(inv, reach)
    places = tuple(framework.place(inv, addresses)) + _evaluator(inv, addresses)
    cluster = Cluster(places, framework.spec(places))
    tasks = [_task(inv, framework, p, framework.hand(inv.job, p, cluster)) for p in places]
    tasks += _tensorboard(inv, framework, addresses)
    order = (*framework.roles, "tensorboard")
    tasks.sort(key=lambda t: order.index(t.type))
    plan = Plan(inventory=inv, tasks=tuple(tasks), cluster=cluster.spec, addresses=addresses,
                places=places)
    return dataclasses.replace(plan, warnings=rules.warnings(plan))


def with_ports(plan: Plan, chosen: Mapping[str, int]) -> Plan:
    """`plan` with the ports `up` took (task name → port) for tasks whose port is chosen at up.

    The plan given is kept: the same tasks (a plan narrowed to a few keeps only those), each
    with its env and argv as they are, but for its port and what the framework hands it from
    the ports (the cluster, TF_CONFIG, the flags), handed again from the new ports."""
    framework = framework_of(plan.inventory.job)
    before = plan.places or tuple(_place_of(t) for t in plan.tasks if t.type in framework.roles)
    after = tuple(dataclasses.replace(p, port=chosen[p.name])
                  if p.port_chosen_at_up and p.name in chosen else p for p in before)
    if after == before:
        return plan
    old, new = Cluster(before, framework.spec(before)), Cluster(after, framework.spec(after))
    was, now = {p.name: p for p in before}, {p.name: p for p in after}
    job = plan.inventory.job
    tasks = tuple(_handed_again(t, framework.hand(job, was[t.name], old),
                                framework.hand(job, now[t.name], new), now[t.name])
                  if t.name in now else t for t in plan.tasks)
    return dataclasses.replace(plan, tasks=tasks, cluster=new.spec, places=after)


def cluster_addresses(inv: Inventory, reach: Reach | None = None) -> dict[str, str]:
    """Host name → the name the cluster gives it: `cluster_address`, else `reach`'s answer,
    else `address`."""
    return {h.name: h.cluster_address or (reach(h) if reach is not None else h.address)
            for h in inv.hosts}


def script_args(inv: Inventory, host: Host, task_type: str) -> list[str]:
    """What follows `job.script`: `job.args`, then the host's `args`, then `job.task_args` of
    the task's type (later wins with argparse, so the most specific value comes last)."""
    return [*inv.job.args, *host.args, *inv.job.task_args.get(task_type, ())]


def _evaluator(inv: Inventory, addresses: Mapping[str, str]) -> tuple[Place, ...]:
    """`job.evaluator`'s place: no port, no GPU, handed the cluster by the framework."""
    ev = inv.job.evaluator
    return () if ev is None else (Place("evaluator", 0, ev.host, addresses[ev.host], None, ""),)


def _task(inv: Inventory, framework: Framework, place: Place, handed: Handed) -> Task:
    host = inv.host(place.host)
    env = _env(inv, framework, host, place.type, place.mask)
    env.update(handed.env)
    for key, value in handed.env_defaults.items():
        env.setdefault(key, value)
    ev = inv.job.evaluator
    if place.type == "evaluator" and ev is not None:
        argv = [host.python, ev.script, *ev.args]
    else:
        argv = [host.python, inv.job.script, *script_args(inv, host, place.type)]
    return Task(place.type, place.index, host.name, place.address, place.port, place.mask, env,
                host.workdir, (*argv, *handed.args), port_chosen_at_up=place.port_chosen_at_up)


def _tensorboard(inv: Inventory, framework: Framework,
                 addresses: Mapping[str, str]) -> list[Task]:
    tb = inv.job.tensorboard
    if tb is None:
        return []
    host = inv.host(tb.host)
    argv = (host.python, "-m", "tensorboard.main", f"--logdir={tb.logdir}", "--host=127.0.0.1",
            f"--port={tb.port}")
    return [Task("tensorboard", 0, host.name, addresses[host.name], tb.port, "",
                 _env(inv, framework, host, "tensorboard", ""), host.workdir, argv)]


def _env(inv: Inventory, framework: Framework, host: Host, task_type: str,
         mask: str) -> dict[str, str]:
    """The framework's base env (with COMMON_ENV), then `defaults.env` and the host's `env`,
    then `job.task_env` of the task's type; the mask is tfctl's and always wins."""
    env = framework.base_env(inv.job)
    for key, value in COMMON_ENV.items():
        env.setdefault(key, value)
    env.update(host.env)
    env.update(inv.job.task_env.get(task_type, {}))
    env["CUDA_VISIBLE_DEVICES"] = mask
    return env


def _place_of(task: Task) -> Place:
    return Place(task.type, task.index, task.host, task.address, task.port,
                 task.cuda_visible_devices, task.port_chosen_at_up)


def _handed_again(task: Task, was: Handed, now: Handed, place: Place) -> Task:
    """`task` at `place`'s port: what the framework handed it before (`was`) replaced by what it
    hands it now; everything else as it was."""
    env = {k: v for k, v in task.env.items() if k in now.env or k not in was.env}
    env.update(now.env)
    for key, value in now.env_defaults.items():
        if key not in env or env[key] == was.env_defaults.get(key):
            env[key] = value
    argv = task.argv
    if was.args and argv[len(argv) - len(was.args):] == was.args:
        argv = argv[:len(argv) - len(was.args)]
    return dataclasses.replace(task, port=place.port, env=env, argv=(*argv, *now.args))
