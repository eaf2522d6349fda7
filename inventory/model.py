"""The resolved inventory: immutable records with every default already applied.

The loader (`load.py`) validates the YAML with the schema in `schema.py` and merges each host
with `defaults`; everything downstream (plan, remote, UI) reads only these records, so no other
module ever has to know which value was inherited.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

Style = Literal["tf_config", "flags", "none", "env"]
"""How a task learns the cluster: TF_CONFIG, the classic flags, not at all (`mirrored`), or
`env`: it is a rank of one process group, handed its framework's variables (torch, jax:
inventory/frameworks/ranks.py), whose end is rank 0's or any rank's failure."""
Strategy = Literal["flags", "parameter_server", "multi_worker_mirrored", "mirrored", "custom"]
"""What the training script does with the cluster; decides the style and which rules apply."""
STRATEGY_STYLE: Mapping[str, Style] = {
    "flags": "flags", "parameter_server": "tf_config", "multi_worker_mirrored": "tf_config",
    "mirrored": "none", "custom": "tf_config",
}
SCRIPT_TYPES = ("ps", "worker", "chief")
"""Task types that run `job.script` (so host and per-type `args` apply to them)."""
WorkerLayout = Literal["per_gpu", "per_host"]
Transport = Literal["ssh", "local"]
RestartMode = Literal["never", "on-failure", "always"]
TASK_TYPES = ("ps", "worker", "chief", "evaluator", "tensorboard")
MAX_INVENTORY_BYTES = 1024 * 1024
"""An inventory is a small YAML file: a bigger one is refused (and never read whole)."""


@dataclass(frozen=True)
class Host:
    """One machine of the lab, with its SSH settings and what runs on it."""

    name: str
    """Unique; used in task names, logs and the UI."""
    address: str
    """IP, DNS name or ~/.ssh/config alias this client reaches it by over ssh (default: the
    name); the cluster spec names it by `cluster_address` or the alias's HostName instead."""
    user: str | None
    """SSH login; None means the current user or what ~/.ssh/config says."""
    port: int | None
    """SSH port; None means 22 or what ~/.ssh/config says."""
    identity_file: str | None
    known_hosts: str
    """The known_hosts file host keys are verified against (and recorded in on opt-in)."""
    jump: str | None
    """A ProxyJump host (`user@bastion:22`), or None."""
    workdir: str
    """Where the code is synced and tasks run; may start with `~` (expanded on the host)."""
    python: str
    """The interpreter on the host that runs the tasks (often a venv's)."""
    env: Mapping[str, str]
    gpus: tuple[int, ...]
    """Selected GPU indices; empty for a CPU-only host."""
    ps: int
    """Parameter servers started on this host."""
    args: tuple[str, ...] = ()
    """Appended to `job.args` for the tasks here that run `job.script` (ps, workers, chief)."""
    cpu_workers: int = 1
    """Workers on a CPU-only host (each with an empty mask); GPU hosts derive them from `gpus`."""
    transport: Transport = "ssh"
    shared_fs: bool = False
    """True when this host sees the same filesystem as the first synced host (sync skips it)."""
    cluster_address: str | None = None
    """The name or IP the other hosts reach it by, written where that is not what this client's
    ssh reaches (a second NIC, a host behind a jump host); None: `address` as the ssh config
    resolves it (its HostName), which is what the plan's cluster spec names."""
    free_gpus: FreeGpus | None = None
    """`gpus: free` / `{free: N}`: `gpus` is a stand-in until `up` takes the GPUs nobody holds
    or reserved (remote/lab/freegpus.py); None: `gpus` is what the file wrote."""
    line: int = 0
    """Line of this host's entry in the inventory file, for messages."""


@dataclass(frozen=True)
class FreeGpus:
    """GPUs chosen at `up` among those nobody holds (a compute process, a live run's claim) or
    reserved (another user's reservation; one's own counts as free)."""

    count: int | None
    """How many to take; None: every such GPU there is (at least one)."""

    def words(self) -> str:
        """`free GPUs, chosen at up` or `2 free GPUs, chosen at up`."""
        return "free GPUs, chosen at up" if self.count is None else \
            f"{self.count} free GPU{'s' if self.count != 1 else ''}, chosen at up"


@dataclass(frozen=True)
class Evaluator:
    """`job.evaluator`: a script beside the training that reads its checkpoints."""

    host: str
    script: str
    args: tuple[str, ...] = ()


@dataclass(frozen=True)
class TensorBoard:
    """`job.tensorboard`: TensorBoard on one host, on 127.0.0.1 (reached through a tunnel)."""

    host: str
    logdir: str = "out"
    port: int = 6006
    keep: bool = False
    """Keep TensorBoard running after the job ended (until `tfctl down`)."""
    grace_s: float = 300.0
    """Otherwise, how long it stays up after the job's end, for a last look at the results."""


@dataclass(frozen=True)
class Ports:
    """First port of each task type; None: tasks of that type open no port (`custom` only)."""

    ps: int | None = 2222
    worker: int | None = 2223
    chief: int | None = 2220
    chosen_at_up: tuple[str, ...] = ()
    """The types whose port the file does not write: `up` takes each task of them its usual
    port above where that is free on its host, else a free one of `free_range`."""
    free_range: tuple[int, int] = (2220, 2299)
    """`job.port_range`, both ends included: where `up` looks for a free port."""


@dataclass(frozen=True)
class Sync:
    """`job.sync`: what is copied to every host's workdir before a start."""

    enabled: bool = True
    source: str = "."
    """Relative to the inventory file's folder."""
    exclude: tuple[str, ...] = (".git", "out")


@dataclass(frozen=True)
class RestartPolicy:
    """What the host-side supervisor does when a task ends: per task type, with a shared cap."""

    policies: Mapping[str, RestartMode] = field(default_factory=dict)
    max: int = 3
    backoff_s: float = 2.0
    together: bool = False
    """Workers and chief restart together (MultiWorkerMirrored cannot rejoin a running group)."""

    def for_type(self, task_type: str) -> RestartMode:
        return self.policies.get(task_type, "never")


@dataclass(frozen=True)
class Notify:
    """`job.notify`: what the chief host's watcher does when the run ends (either or both)."""

    command: str | None = None
    """A shell command run on the chief's host, the run's end in its environment (TFCTL_*)."""
    webhook: str | None = None
    """An http(s) URL the watcher POSTs the run's end to, as JSON."""


SCRIPT_HINT = "add `script: train.py` (relative to the synced folder)"
"""What to write where `job.script` (or `job.evaluator.script`) is missing."""


@dataclass(frozen=True)
class Job:
    """`job:`: what runs on the hosts, and how."""

    script: str
    """The script every task runs; "" where the file writes none (no `job:`, or a `job:` that
    only says how `tfctl run`'s commands run): there is then no job to plan (plan.make_plan)."""
    args: tuple[str, ...] = ()
    framework: str = "tensorflow"
    """How the tasks find each other: a name of `inventory/frameworks/` (`FRAMEWORKS`)."""
    style: Style = "tf_config"
    workers: WorkerLayout = "per_gpu"
    strategy: Strategy | None = None
    """The `job.strategy` written in the file; None for an old file that gives only `style`."""
    chief: str | None = None
    """The host that runs `chief:0`, or None for no chief."""
    evaluator: Evaluator | None = None
    tensorboard: TensorBoard | None = None
    ports: Ports = field(default_factory=Ports)
    sync: Sync = field(default_factory=Sync)
    setup: tuple[str, ...] = ()
    setup_inputs: tuple[str, ...] = ()
    restart: RestartPolicy = field(default_factory=RestartPolicy)
    task_args: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    """Per task type (ps, worker, chief): appended after `args` and the host's `args`."""
    task_env: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    """Per task type (any of TASK_TYPES): set after the host's env, so it wins over it."""
    throughput: tuple[str, ...] = ()
    """Regexes for a training speed in the logs (empty: the usual forms, see agent/record.py)."""
    keras: str = "default"
    """`legacy`: every task runs with TF_USE_LEGACY_KERAS=1 (tf.keras is Keras 2, tf_keras)."""
    outputs: tuple[str, ...] = ("out",)
    """Folders the job writes, relative to the workdir: made on every host before launch,
    brought home by `tfctl collect` (default: the TensorBoard logdir, else `out`)."""
    silence_window_s: float = 600.0
    """How long a host whose link to the chief is silent (no answer, not a refusal) keeps its
    tasks running before it ends its part of the job (`job.silence_window`)."""
    log_max_bytes: int = 256 << 20
    """A task's log is rotated at this size (`job.log_max_mb`): `<task>.log` and `.log.1`."""
    disk_floor_bytes: int = 1024 << 20
    """`check` warns below this much room in a host's workdir filesystem (`job.disk_floor_mb`)."""
    notify: Notify | None = None
    """`job.notify`: word when the run ends, from the chief host's watcher."""


@dataclass(frozen=True)
class Slurm:
    """`slurm:`: the batch job `tfctl export slurm` writes and `up --on slurm` submits."""

    host: str = "local"
    """Where `up --on slurm` runs `sbatch`: `local`, or the name of a host entry (over SSH)."""
    partition: str | None = None
    account: str | None = None
    time: str | None = None
    """The time limit, in Slurm's form (`2:00:00`, `1-12:00:00`)."""
    nodes: int | None = None
    """Nodes asked for; None: one per host of the plan."""
    gpus_per_node: int | None = None
    """`--gres=gpu:K`; None: the most GPUs a host of the plan has."""
    sbatch_args: tuple[str, ...] = ()
    workdir: str | None = None
    """The folder every task runs in (shared by the nodes); None: the first host's workdir."""
    line: int = 0


@dataclass(frozen=True)
class Kubernetes:
    """`kubernetes:`: what `tfctl export tfjob` needs beyond the plan."""

    image: str | None = None
    namespace: str = "default"
    name: str | None = None
    """The TFJob's name; None: the inventory's name."""
    python: str = "python3"
    """The interpreter in the image (the hosts' `python` means nothing there)."""
    workdir: str | None = None
    """The container's working directory; None: the image's."""
    claim: str | None = None
    """A PersistentVolumeClaim mounted at `workdir`, where the outputs stay."""
    on_failure: str = "OnFailure"
    """What `restart: on-failure` becomes: OnFailure (any failure) or ExitCode (kills only)."""
    line: int = 0


@dataclass(frozen=True)
class Inventory:
    """The whole file resolved: its hosts, its job, and where it came from."""

    name: str
    hosts: tuple[Host, ...]
    job: Job
    path: str = "cluster.yaml"
    """The file it was read from; sync sources and state files are relative to its folder."""
    hostfile: str | None = None
    """The machinefile the hosts were read from (absolute path), or None."""
    slurm: Slurm | None = None
    """`slurm:`, or None when the file has none (`export slurm` then takes the defaults)."""
    kubernetes: Kubernetes | None = None
    """`kubernetes:`, or None when the file has none."""
    job_written: bool = True
    """False for a file without `job:`: its hosts serve one-off commands (`tfctl run`), and
    there is no job to plan (`plan.make_plan` says so); `job` then holds the defaults."""
    job_line: int | None = None
    """The line of `job:` in the file, or, where the file has none, of its first key (where
    the plan's refusal of a file without a job points, as for any key the file lacks)."""

    def host(self, name: str) -> Host:
        for host in self.hosts:
            if host.name == name:
                return host
        raise KeyError(name)

    @property
    def base_dir(self) -> str:
        import os.path

        return os.path.dirname(os.path.abspath(self.path))
