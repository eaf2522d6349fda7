"""The plan as one Slurm batch script that a person can read, edit and `sbatch` by hand.

Design: one job step per planned task. The driver (the batch script on the allocation's first
node) starts every task with `srun --overlap --nodes=1 --ntasks=1 --nodelist=<node>`, so

- each task lands on the node that stands for its lab host (the plan's hosts in file order
  become the allocation's nodes in `scontrol show hostnames` order) and nowhere else, which
  neither `srun --multi-prog` (Slurm's block distribution decides the placement) nor a
  heterogeneous job (one component per host, many extra `#SBATCH hetjob` lines) gives as simply;
- the driver sees every task end with its own exit status, so it ends the job as tfctl does on
  the lab (`remote/runs/endrule.py`): the chief's end, worker 0's under flags, rank 0's or any
  rank's failure in a process group (torch, jax: then every rank is stopped), else every
  worker's; parameter servers are stopped then, the others get a grace;
- `--overlap` lets the steps on one node share its CPUs, memory and GPUs, as processes on a lab
  host do; each task's CUDA_VISIBLE_DEVICES is set by the launcher (see `slurm_sh.tfctl_gpus`).

Each task's TF_CONFIG (tf_config style), `--ps_hosts/--worker_hosts/--job_name/--task_index`
(flags style) or rank 0's address (torch's MASTER_ADDR, JAX's coordinator: style env) is
computed when the task starts, from the nodes Slurm gave the job, exactly as
`inventory/plan.py` builds them from the hosts: so the script is the plan with host names
replaced by node names. A task's GPUs are written as positions among its host's selected GPUs
(`gpus: [0, 2]`: masks 0 and 2 become positions 0 and 1), since a Slurm node's GPUs are those
it gives the job. Conventions after TensorFlow's SlurmClusterResolver
(tensorflow/python/distribute/cluster_resolver/slurm_cluster_resolver.py).
"""

from __future__ import annotations

import shlex
import textwrap
from collections import Counter

from tfctl.inventory.errors import InventoryError
from tfctl.inventory.frameworks import framework_of
from tfctl.inventory.frameworks.gloo import is_found_at_start
from tfctl.inventory.model import Inventory, Slurm
from tfctl.inventory.plan import Plan, Task
from tfctl.remote.agent.watch import WORKER_GRACE_S
from tfctl.remote.exporters.slurm_sh import MACHINERY
from tfctl.remote.runs.endrule import deciders, serving_types

GROUP_ADDRESS_ENV = {
    "torch": ("MASTER_ADDR", "MASTER_PORT"),
    "jax": ("JAX_COORDINATOR_ADDRESS", "KERAS_DISTRIBUTION_JOB_ADDRESSES"),
}
"""A job of ranks' variables that name hosts: each task computes them from the nodes
(`tfctl_group_env` in slurm_sh.py), as the others come from the plan as they are."""


def sbatch_script(plan: Plan, filename: str = "job.sbatch") -> str:
    """The batch script for `plan`; `filename` is only named in its comments (how to submit).
    Raises InventoryError where `slurm:` asks for fewer nodes or GPUs than the plan uses."""
    inv = plan.inventory
    _require_group_env(inv)
    settings = inv.slurm or Slurm()
    hosts = plan.hosts_used
    positions = {t.name: gpu_positions(inv, t) for t in plan.tasks}
    gpus = _gpus_per_node(inv, settings, hosts, positions)
    nodes = _nodes(inv, settings, hosts)
    workdir = settings.workdir or inv.host(hosts[0]).workdir
    lines = _header(plan, filename, nodes, hosts, workdir)
    lines += _sbatch_lines(plan, settings, nodes, gpus, workdir)
    lines += ["", *_settings(plan, workdir, gpus, len(hosts)), "", *_table(plan, positions)]
    return "\n".join(lines) + "\n" + MACHINERY.lstrip("\n")


def _require_group_env(inv: Inventory) -> None:
    """A job of ranks whose variables this script cannot compute on the nodes is refused."""
    framework = framework_of(inv.job)
    if framework.one_group and inv.job.framework not in GROUP_ADDRESS_ENV:
        raise InventoryError(inv.path, None, "job.framework",
                             f"the Slurm script cannot hand {framework.title}'s ranks rank 0's "
                             "address on the nodes Slurm gives", "run it on the hosts with "
                             "`tfctl up` (`tfctl plan` shows what each rank gets)")


def gpu_positions(inv: Inventory, task: Task) -> tuple[int, ...]:
    """The task's GPUs as positions among its host's selected GPUs (its mask, renumbered)."""
    if not task.cuda_visible_devices:
        return ()
    selected = inv.host(task.host).gpus
    return tuple(selected.index(int(g)) for g in task.cuda_visible_devices.split(","))


def node_of(plan: Plan) -> dict[str, int]:
    """Each host of the plan → its node's position in the allocation."""
    return {host: i for i, host in enumerate(plan.hosts_used)}


def _gpus_per_node(inv: Inventory, settings: Slurm, hosts: tuple[str, ...],
                   positions: dict[str, tuple[int, ...]]) -> int:
    most = max((len(inv.host(h).gpus) for h in hosts), default=0)
    if settings.gpus_per_node is None:
        return most
    needed = max((p + 1 for ps in positions.values() for p in ps), default=0)
    if settings.gpus_per_node < needed:
        task = next(n for n, ps in positions.items() if ps and max(ps) + 1 == needed)
        raise InventoryError(inv.path, settings.line or None, "slurm.gpus_per_node",
                             f"{settings.gpus_per_node} GPUs per node, but {task} uses its "
                             f"host's GPU number {needed}",
                             f"write `gpus_per_node: {needed}` or more, or remove it (the "
                             f"default is {most}, the most GPUs a host has)")
    return settings.gpus_per_node


def _nodes(inv: Inventory, settings: Slurm, hosts: tuple[str, ...]) -> int:
    if settings.nodes is None:
        return len(hosts)
    if settings.nodes < len(hosts):
        raise InventoryError(inv.path, settings.line or None, "slurm.nodes",
                             f"{settings.nodes} node(s) cannot hold the plan's {len(hosts)} "
                             f"hosts ({', '.join(hosts)}): each host becomes one node",
                             f"write `nodes: {len(hosts)}` or remove it; to spread the job "
                             "wider, list more hosts (or pass --hostfile)")
    return settings.nodes


def _end_words(plan: Plan) -> str:
    tasks, mode = deciders(plan)
    if mode == "group":
        return f"when rank 0 ({tasks[0].name}) ends or any rank fails (then every rank stops)"
    if mode == "any":
        return f"when {tasks[0].name} ends" if len(tasks) == 1 else \
            f"when one of {', '.join(t.name for t in tasks)} ends"
    return "when every worker has ended"


def _header(plan: Plan, filename: str, nodes: int, hosts: tuple[str, ...],
            workdir: str) -> list[str]:
    inv = plan.inventory
    job = inv.job
    where = ", ".join(f"{h} -> node {i + 1}" for i, h in enumerate(hosts))
    idle = f" ({nodes - len(hosts)} more node(s) stay idle)" if nodes > len(hosts) else ""
    strategy = job.strategy or f"(none: style {job.style})"
    what, handed = f"Strategy {strategy}", "its TF_CONFIG (or flags)"
    if framework_of(job).one_group:
        what = f"One {job.framework} process group"
        handed = "rank 0's address (" + ", ".join(GROUP_ADDRESS_ENV[job.framework]) + ")"
    submit = [f"#   sbatch {filename}"] if _absolute(workdir) else [
        f"#   cd {workdir} && sbatch {filename}",
        "#   (from the workdir: sbatch writes its own log, %x-%j.out, where you submit)"]
    about = (
        f"{what}, {len(plan.tasks)} tasks; hosts become the allocation's nodes "
        f"in order: {where}{idle}. Every task is its own job step (srun --overlap on its "
        "node), so this script sees each task end and ends the job as tfctl does: "
        f"{_end_words(plan)}. Each task computes {handed} when it starts, from "
        "the nodes Slurm gave the job, and its GPUs are positions among the node's: what "
        "`tfctl plan` shows, on these nodes. sbatch passes your shell's environment on: "
        "submit from one without CUDA_VISIBLE_DEVICES (a task reads it as the GPUs Slurm "
        "bound to it).")
    return [
        "#!/bin/bash",
        f"# {inv.name}: the tfctl job as one Slurm batch job, written by `tfctl export slurm`",
        f"# from {inv.path}. Edit it freely (the task table below is the plan); submit it:",
        *submit,
        "#   squeue --me; tail -f <workdir>/.tfctl/slurm/<job id>/*.log   # one log per task",
        "#",
        *textwrap.wrap(about, width=96, initial_indent="# ", subsequent_indent="# ",
                       break_on_hyphens=False),
    ]


def _sbatch_lines(plan: Plan, settings: Slurm, nodes: int, gpus: int,
                  workdir: str) -> list[str]:
    per_node = Counter(t.host for t in plan.tasks)
    # No comment after an option on its line: sbatch would read it as part of the value.
    lines = ["# One CPU per task of the busiest host at least; the GPUs of the busiest host.",
             f"#SBATCH --job-name={plan.inventory.name}", f"#SBATCH --nodes={nodes}",
             f"#SBATCH --ntasks-per-node={max(per_node.values())}"]
    if gpus:
        lines.append(f"#SBATCH --gres=gpu:{gpus}")
    for key in ("partition", "account", "time"):
        value = getattr(settings, key)
        if value is not None:
            lines.append(f"#SBATCH --{key}={value}")
    if _absolute(workdir):
        lines.append(f"#SBATCH --chdir={workdir}")
    lines.append("#SBATCH --output=%x-%j.out")
    lines += [f"#SBATCH {arg}" for arg in settings.sbatch_args]
    return lines


def _absolute(path: str) -> bool:
    return path.startswith("/")


def bash_path(path: str) -> str:
    """`path` for bash, `~/x` as `"$HOME"/x` (expanded on the node, not here)."""
    if path == "~":
        return '"$HOME"'
    if path.startswith("~/"):
        return '"$HOME"/' + shlex.quote(path[2:])
    return shlex.quote(path)


def _settings(plan: Plan, workdir: str, gpus: int, nodes_needed: int) -> list[str]:
    job = plan.inventory.job
    tb = job.tensorboard
    tb_grace = 0 if tb is None else -1 if tb.keep else int(tb.grace_s)
    outputs = " ".join(shlex.quote(o) for o in job.outputs)
    return [
        f"WORKDIR={bash_path(workdir)}   # every task runs here: the same folder on every node",
        f"STYLE={job.style}   # how a task learns the cluster: tf_config | flags | none | env",
        f"FRAMEWORK={job.framework}   # env: whose variables name rank 0 (torch | jax)",
        f"OUTPUTS=({outputs})   # folders the job writes (in WORKDIR), made before the start",
        f"GPUS_PER_NODE={gpus}   # the --gres count: GPU positions run from 0 to this less 1",
        f"NODES_NEEDED={nodes_needed}",
        f"WORKER_GRACE_S={int(WORKER_GRACE_S)}   # after the end: time for workers, evaluator",
        f"TENSORBOARD_GRACE_S={tb_grace}   # then TensorBoard's (-1: until the time limit)",
        f"RESTART_MAX={job.restart.max} RESTART_BACKOFF_S={job.restart.backoff_s:g}"
        "   # per task, for RESTART on-failure | always",
    ]


def _table(plan: Plan, positions: dict[str, tuple[int, ...]]) -> list[str]:
    inv = plan.inventory
    nodes = node_of(plan)
    index = {t.name: n for n, t in enumerate(plan.tasks)}
    end, mode = deciders(plan)
    serving = serving_types(plan)
    computed = ("CUDA_VISIBLE_DEVICES", "TF_CONFIG", *GROUP_ADDRESS_ENV.get(
        inv.job.framework, ()))
    # A value found on the host at start (GLOO_SOCKET_IFNAME) is the agent's to find: under
    # Slurm the variable is left to the cluster's own setting.
    envs = [[f"{k}={v}" for k, v in t.env.items() if k not in computed
             and not is_found_at_start(v)] for t in plan.tasks]
    common = [e for e in envs[0] if all(e in other for other in envs)]
    lines = [
        "# The tasks, in launch order. NODE: the task's host as a node (0: the allocation's",
        "# first); PORT: empty for none; GPUS: positions among the node's GPUs (empty: CPU",
        "# only); ENV and ARGV as `tfctl plan --json` shows them, less the mask and TF_CONFIG",
        "# (and rank 0's address: computed from the nodes).",
        f"COMMON_ENV=({' '.join(shlex.quote(e) for e in common)})",
        "tfctl_task() {",
        "  case $1 in",
    ]
    for n, task in enumerate(plan.tasks):
        gpus = ",".join(str(p) for p in positions[task.name])
        env = ['"${COMMON_ENV[@]}"', *(shlex.quote(e) for e in envs[n] if e not in common)]
        argv = list(task.argv)
        if inv.job.style == "flags" and task.type in ("ps", "worker", "chief"):
            argv = argv[:-4]  # the four cluster flags: computed from the nodes at run time
        mask = task.cuda_visible_devices
        mask = "CPU" if not mask else f"GPUs {mask}" if "," in mask else f"GPU {mask}"
        lines += [
            f"    {n}) NAME={task.name} NODE={nodes[task.host]} PORT={task.port or ''}"
            f" GPUS={gpus} RESTART={inv.job.restart.for_type(task.type)}"
            f"   # on the lab: {task.host}, {mask}",
            f"       ENV=({' '.join(env)})",
            f"       ARGV=({' '.join(shlex.quote(a) for a in argv)}) ;;",
        ]
    lines += ["    *) return 1 ;;", "  esac", "}",
              f"NTASKS={len(plan.tasks)}",
              f"END_TASKS=({' '.join(str(index[t.name]) for t in end)})"
              f"   # {', '.join(t.name for t in end)}: their end is the job's end",
              f"END_MODE={mode}   # any: one of them ended; all: every one of them; group: "
              "the first ended or one failed",
              "STOP_AT_END=(" + " ".join(str(n) for n, t in enumerate(plan.tasks)
                                         if t.type in serving) + ")   # only serve: stopped",
              "TENSORBOARD=(" + " ".join(str(n) for n, t in enumerate(plan.tasks)
                                         if t.type == "tensorboard") + ")"]
    return lines
