"""TensorFlow's rules for each `job.strategy`, checked on the finished plan.

A refusal is a mistake TensorFlow would make you find at run time, on every host at once: an
exception in each task's log, or worse a job that hangs or never ends. Each `Refusal` says what
TensorFlow does, and what to write instead; the loader turns the first one into a located
`InventoryError` (exit 2, through `inventory/rules.py`). A warning is a plan that runs but
wastes the lab; `make_plan` puts the warnings on `Plan.warnings`, which `tfctl plan` prints.

Only a file that names its `strategy` is refused anything (`custom` nothing at all). A warning is
a trap the plan walks into, whether or not the file says why it is written that way: a file with
only `style:` gets the warnings of what that style can only mean (flags: the classic
between-graph strategy; tf_config with parameter servers: ParameterServerStrategy). Where
each rule comes from in TensorFlow's own source and guides: docs/strategy-rules.md.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from tfctl.inventory.frameworks.interface import Refusal

if TYPE_CHECKING:  # (yamlmarks would import PyYAML, which a cached inventory's plan never needs)
    from tfctl.inventory.tasks import Plan, Task
    from tfctl.inventory.yamlmarks import PathKey


Rule = Callable[["Plan"], "Refusal | None"]


def refusals(plan: Plan) -> list[Refusal]:
    """Every rule the plan's strategy breaks, in the order a reader should fix them."""
    found = (rule(plan) for rule in _RULES.get(plan.inventory.job.strategy or "", ()))
    return [f for f in found if f is not None]


def warnings(plan: Plan) -> tuple[str, ...]:
    """What runs but fails later or wastes the lab; a file without `strategy:` is judged by what
    its style implies (`_STYLE_WARNINGS`)."""
    job = plan.inventory.job
    checks = _WARNINGS.get(job.strategy, ()) if job.strategy is not None \
        else _STYLE_WARNINGS.get(job.style, ())
    return tuple(w for check in checks for w in check(plan))


# ---------------------------------------------------------------- refusals


def needs_chief(plan: Plan) -> Refusal | None:
    """ParameterServerStrategy is driven by its coordinator, TF's task type `chief`."""
    if plan.inventory.job.chief is not None:
        return None
    return Refusal(
        (("job", "chief"), ("job", "strategy")),
        "strategy parameter_server needs a chief: the coordinator (TensorFlow task type "
        "`chief`) creates the variables and dispatches every step, while the ps and workers "
        "only wait in server.join(); without it nothing trains and the job never ends",
        "add `chief: true` (on the first host) or `chief: <host name>`")


def needs_ps(plan: Plan) -> Refusal | None:
    """parameter_server: TF raises "There must be at least one ps."; flags: with no ps job,
    replica_device_setter places nothing remotely and each worker trains a model of its own."""
    if any(t.type == "ps" for t in plan.tasks):
        return None
    strategy = plan.inventory.job.strategy
    why = ("TensorFlow: \"There must be at least one ps.\"" if strategy == "parameter_server"
           else "between-graph workers share variables only through the ps: with none, each "
                "worker trains a model of its own")
    keys = tuple(("hosts", i, "ps") for i in range(len(plan.inventory.hosts)))
    return Refusal((*keys, ("hosts",), ("hostfile",)),
                   f"strategy {strategy} needs at least one parameter server, but every host has "
                   f"`ps: 0` ({why})",
                   "set `ps: 1` on one host (its parameter servers run on the CPU)")


def same_worker_devices(plan: Plan) -> Refusal | None:
    """MultiWorkerMirroredStrategy: every training task (workers and the chief) must bring the
    same devices, or the collective all-reduce spans device sets that do not match."""
    trainers = [t for t in plan.tasks if t.type in ("worker", "chief")]
    odd, ref = _odd_one(trainers)
    if odd is None or ref is None:
        return None
    n_odd, n_ref = gpu_count(odd), gpu_count(ref)
    message = (f"strategy multi_worker_mirrored needs the same devices in every worker, but "
               f"{odd.name} on {odd.host} has {_devices(n_odd)} and {ref.name} on {ref.host} "
               f"has {_devices(n_ref)} (TensorFlow: \"All workers need to use the same number of "
               "devices, otherwise the behavior is undefined\": its all-reduce spans them all)")
    if n_odd and n_ref:
        return Refusal(_layout_keys(plan, odd.host), message, _EQUAL_GPUS_HINT)
    if not n_odd:
        hint = (f"give {odd.host} GPUs, or take it out of `hosts:` (or set `gpus: 0` on every "
                "host to train on CPUs only)")
    else:
        hint = f"set `gpus: 0` on {odd.host} to train on CPUs like the others, or give all GPUs"
    return Refusal(_host_keys(plan, odd.host), message, hint)


def same_ps_worker_gpus(plan: Plan) -> Refusal | None:
    """ParameterServerStrategy counts the GPUs of each worker that has any and raises
    "Mismatched number of GPUs per worker" unless they are equal."""
    with_gpus = [t for t in plan.tasks if t.type == "worker" and gpu_count(t)]
    odd, ref = _odd_one(with_gpus)
    if odd is None or ref is None:
        return None
    return Refusal(
        _layout_keys(plan, odd.host),
        f"strategy parameter_server needs the same number of GPUs on every worker, but "
        f"{odd.name} on {odd.host} has {_devices(gpu_count(odd))} and {ref.name} on {ref.host} "
        f"has {_devices(gpu_count(ref))} (TensorFlow: \"Mismatched number of GPUs per worker\")",
        _EQUAL_GPUS_HINT)


_EQUAL_GPUS_HINT = ("use `workers: per_gpu` (one GPU per worker), or select the same number of "
                    "GPUs on every host (`gpus: [...]`)")

_RULES: dict[str, tuple[Rule, ...]] = {
    "parameter_server": (needs_chief, needs_ps, same_ps_worker_gpus),
    "multi_worker_mirrored": (same_worker_devices,),
    "flags": (needs_ps,),
}


# ---------------------------------------------------------------- warnings


def flags_per_host_idles_gpus(plan: Plan) -> list[str]:
    """Classic between-graph code builds one graph on /gpu:0 of what its mask shows."""
    if plan.inventory.job.workers != "per_host":
        return []
    out = []
    for t in plan.tasks:
        gpus = t.cuda_visible_devices.split(",") if t.cuda_visible_devices else []
        if t.type == "worker" and len(gpus) > 1:
            out.append(
                f"{t.name} on {t.host} gets GPUs {t.cuda_visible_devices}, but between-graph "
                f"code pins its graph to one device: GPU {gpus[0]} busy, "
                f"{_gpu_list(gpus[1:])} idle unless the script builds towers; "
                "use `workers: per_gpu`")
    return out


def mirrored_hosts_train_apart(plan: Plan) -> list[str]:
    """MirroredStrategy is one machine's strategy: each host's process trains on its own."""
    hosts = [h for h in plan.hosts_used if any(t.type == "worker" for t in plan.on_host(h))]
    if len(hosts) < 2:
        return []
    return [f"strategy mirrored on {len(hosts)} hosts runs {len(hosts)} independent trainings "
            f"({', '.join(hosts)}; MirroredStrategy never talks across hosts): fine for separate "
            "experiments; for one model across hosts use `strategy: multi_worker_mirrored`"]


def ps_checkpoints_need_shared_fs(plan: Plan) -> list[str]:
    """TF's default saver is sharded: every ps writes its shard into the checkpoint path on its
    own host, and one of them merges the shards. With ps on several hosts that path must be one
    every ps and the saving task see (docs/strategy-rules.md, "sharded checkpoints")."""
    job, hosts = plan.inventory.job, plan.inventory.hosts
    saver = job.chief if job.chief else next(
        (t.host for t in plan.tasks if t.type == "worker" and t.index == 0), None)
    ps_hosts = {h.name for h in hosts if h.ps}
    names = ps_hosts | ({saver} if saver else set())
    if len(ps_hosts) < 1 or len(names) < 2:
        return []
    if all(plan.inventory.host(name).shared_fs for name in names):
        return []
    outputs = ", ".join(job.outputs)
    return [f"parameter servers on {len(ps_hosts)} host(s) ({', '.join(sorted(ps_hosts))}) "
            f"and the saving task on {saver}: TensorFlow's default (sharded) checkpoint is "
            "written by every ps on its own host and merged on one, so a host-local checkpoint "
            f"dir (job.outputs: {outputs}) fails at the first save with `…_temp; No such file "
            "or directory`. Either put it on a filesystem all of them see, as one absolute path "
            f"(mark those hosts `shared_fs: true`), or have the "
            f"{'chief' if job.chief else 'worker 0'} write it itself (TF1: "
            "`Saver(sharded=False)` on its device; TF2: `tf.train.CheckpointOptions("
            "experimental_io_device=<its CPU>)`), as the bundled examples/train.py does."]


def tf_config_parameter_servers(plan: Plan) -> list[str]:
    """`style: tf_config` without a strategy: with parameter servers it can only be
    ParameterServerStrategy, which needs its coordinator and then walks into the sharded
    checkpoint; without any it is MultiWorkerMirroredStrategy or the script's own use."""
    job, hosts = plan.inventory.job, plan.inventory.hosts
    if not any(h.ps for h in hosts):
        return []
    if not job.chief:
        return ["style tf_config with parameter servers but no chief: ParameterServerStrategy "
                "needs `chief: true`; for MultiWorkerMirroredStrategy set `ps: 0` on every host."]
    return ps_checkpoints_need_shared_fs(plan)


_WARNINGS: dict[str, tuple[Callable[[Plan], list[str]], ...]] = {
    "parameter_server": (ps_checkpoints_need_shared_fs,),
    "flags": (flags_per_host_idles_gpus, ps_checkpoints_need_shared_fs),
    "mirrored": (mirrored_hosts_train_apart,),
}
_STYLE_WARNINGS: dict[str, tuple[Callable[[Plan], list[str]], ...]] = {
    "flags": _WARNINGS["flags"],  # the flags are only ever read by between-graph code
    "tf_config": (tf_config_parameter_servers,),
}


# ---------------------------------------------------------------- helpers


def gpu_count(task: Task) -> int:
    """GPUs in a task's mask; 0 means it trains on the CPU."""
    return len(task.cuda_visible_devices.split(",")) if task.cuda_visible_devices else 0


def _odd_one(tasks: Sequence[Task]) -> tuple[Task | None, Task | None]:
    """The first task whose GPU count differs from the most common one, and one that has it."""
    if not tasks:
        return None, None
    common = Counter(gpu_count(t) for t in tasks).most_common(1)[0][0]
    odd = next((t for t in tasks if gpu_count(t) != common), None)
    ref = next(t for t in tasks if gpu_count(t) == common)
    return odd, ref


def _devices(n: int) -> str:
    return "CPU only" if n == 0 else f"{n} GPU" + ("s" if n > 1 else "")


def _gpu_list(gpus: Sequence[str]) -> str:
    """`GPU 3`, `GPUs 1–3` for a run, `GPUs 1, 3` otherwise."""
    if len(gpus) == 1:
        return f"GPU {gpus[0]}"
    numbers = [int(g) for g in gpus]
    if numbers == list(range(numbers[0], numbers[0] + len(numbers))):
        return f"GPUs {numbers[0]}–{numbers[-1]}"
    return "GPUs " + ", ".join(gpus)


def _host_index(plan: Plan, host: str) -> int:
    return next(i for i, h in enumerate(plan.inventory.hosts) if h.name == host)


def _host_keys(plan: Plan, host: str) -> tuple[PathKey, ...]:
    i = _host_index(plan, host)
    return (("hosts", i, "gpus"), ("hosts", i), ("hostfile",))


def _layout_keys(plan: Plan, host: str) -> tuple[PathKey, ...]:
    """`workers: per_host` made the counts differ: point there, else at the odd host."""
    return (("job", "workers"), *_host_keys(plan, host))
