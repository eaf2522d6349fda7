"""The inventory file's schema, as pydantic models: what keys exist and what types they take.

Validation only; the loader turns a validated `FileSpec` into the resolved records of `model.py`.
Every model forbids unknown keys (a typo must not be silently ignored) and is strict about types
(`port: "22"` is a mistake worth naming, not something to coerce quietly).
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    field_validator,
    model_validator,
)

from tfctl.inventory.model import Strategy

Port = int
# A variable name as a shell and execve() accept it (no `=`, no NUL, not empty).
EnvName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")]
# What execve() can carry: anything but NUL.
Arg = Annotated[str, StringConstraints(pattern=r"^[^\x00]*$")]
Env = dict[EnvName, Arg]
# A task port, or `none`/`null`: tasks of that type open no port (only `strategy: custom`).
TaskPort = int | Literal["none"] | None


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


def _check_port(value: int | str | None) -> int | str | None:
    if isinstance(value, int) and not 1 <= value <= 65535:
        raise ValueError("a port is a number from 1 to 65535")
    return value


class SshSpec(_Strict):
    """Keys a host may set itself or inherit from `defaults`."""

    user: str | None = None
    port: int | None = None
    identity_file: str | None = None
    known_hosts: str | None = None
    jump: str | None = None
    workdir: str | None = None
    python: str | None = None
    env: dict[EnvName, Arg] | None = None
    transport: Literal["ssh", "local"] | None = None

    _port = field_validator("port")(classmethod(lambda cls, v: _check_port(v)))


class DefaultsSpec(SshSpec):
    pass


_HOST_NAME = re.compile(r"^[A-Za-z0-9_](?:[A-Za-z0-9_.-]{0,252}[A-Za-z0-9_.])?$")
"""A DNS name, a name of /etc/hosts, or an IPv4 address (never starting with `-`)."""


def _is_ipv6(value: str) -> bool:
    import ipaddress

    try:
        ipaddress.IPv6Address(value)
    except ValueError:
        return False
    return True


class FreeGpusSpec(_Strict):
    """`gpus: {free: 2}`: that many of the host's GPUs nobody holds or reserved, chosen at up."""

    free: int = Field(ge=1, le=64)


class HostSpec(SshSpec):
    name: str = Field(min_length=1, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
    # Never starting with `-`: an address must not be readable as an ssh/rsync option.
    address: str | None = Field(default=None, min_length=1, pattern=r"^[^-\s][^\s]*$")
    # A count, indices, or `free` / `{free: N}`: the GPUs nobody holds, chosen at `up`.
    gpus: int | list[int] | Literal["free"] | FreeGpusSpec = 0
    # None: the strategy's default (0 for multi_worker_mirrored and mirrored, else 1).
    ps: int | None = Field(default=None, ge=0, le=64)
    # Appended to job.args for this host's ps, workers and chief (e.g. a smaller batch here).
    args: list[Arg] = []
    cpu_workers: int = Field(default=1, ge=1, le=64)
    shared_fs: bool = False
    # The name or IP the other hosts reach this one by, for the cluster spec, where it is not
    # what this client's ssh reaches (a second NIC, a host behind a jump host).
    cluster_address: str | None = None

    @field_validator("cluster_address")
    @classmethod
    def _cluster_address(cls, value: str | None) -> str | None:
        if value is None or _HOST_NAME.match(value) or _is_ipv6(value):
            return value
        raise ValueError("not a host name or an IP address (no port, no spaces)")

    @field_validator("gpus")
    @classmethod
    def _gpus(cls, value: int | list[int] | str | FreeGpusSpec
              ) -> int | list[int] | str | FreeGpusSpec:
        if isinstance(value, int) and not 0 <= value <= 64:
            raise ValueError("a GPU count is a number from 0 to 64")
        if isinstance(value, list) and any(i < 0 for i in value):
            raise ValueError("GPU indices are 0 or more")
        return value


class EvaluatorSpec(_Strict):
    host: str
    script: str = Field(min_length=1)
    args: list[Arg] = []


class TensorBoardSpec(_Strict):
    host: str
    logdir: str = "out"
    port: int = 6006
    keep: bool = False  # keep it running after the job ended, until `tfctl down`
    grace: float = Field(default=300.0, ge=0, le=7 * 24 * 3600)  # else, seconds it stays after

    _port = field_validator("port")(classmethod(lambda cls, v: _check_port(v)))


class PortsSpec(_Strict):
    """First port per task type; `none` (or `null`): that type opens no port (`custom` only)."""

    ps: TaskPort = 2222
    worker: TaskPort = 2223
    chief: TaskPort = 2220

    _ports = field_validator("ps", "worker", "chief")(classmethod(lambda cls, v: _check_port(v)))


def port_range(value: str) -> tuple[int, int]:
    """`"2220-2299"` → (2220, 2299); ValueError saying what a range is."""
    match = re.fullmatch(r"(\d{1,5})-(\d{1,5})", value)
    low, high = (int(match.group(1)), int(match.group(2))) if match else (0, 0)
    if not match or not 1024 <= low <= high <= 65535:
        raise ValueError("a port range is LOW-HIGH, from 1024 to 65535, low first "
                         "(e.g. `2220-2299`)")
    return low, high


class NotifySpec(_Strict):
    """`job.notify`: word when the run ends, sent by the chief host's watcher (either or both)."""

    command: str | None = Field(default=None, min_length=1, pattern=r"^[^\x00]*$")
    webhook: str | None = None

    @field_validator("webhook")
    @classmethod
    def _webhook(cls, value: str | None) -> str | None:
        if value is None or re.fullmatch(r"https?://[^\s/?#@]+(?:[/?#]\S*)?", value):
            return value
        raise ValueError("a webhook is an http:// or https:// URL, without spaces")

    @model_validator(mode="after")
    def _something(self) -> NotifySpec:
        if self.command is None and self.webhook is None:
            raise ValueError("give `command:`, `webhook:` or both")
        return self


class SyncSpec(_Strict):
    source: str = "."
    exclude: list[str] = [".git", "out"]


class RestartSpec(_Strict):
    """Per task type restart policy: `{worker: on-failure, max: 3, backoff: 2}`."""

    ps: Literal["never", "on-failure", "always"] = "never"
    worker: Literal["never", "on-failure", "always"] = "never"
    chief: Literal["never", "on-failure", "always"] = "never"
    evaluator: Literal["never", "on-failure", "always"] = "never"
    tensorboard: Literal["never", "on-failure", "always"] = "never"
    max: int = Field(default=3, ge=0, le=1000)
    backoff: float = Field(default=2.0, ge=0, le=3600)
    # Restart the training tasks (workers, chief) together: a failed one waits until its peers
    # have stopped too. Default: on under multi_worker_mirrored, which cannot rejoin a group.
    together: bool | None = None


class TaskArgsSpec(_Strict):
    """`job.task_args`: per task type running `job.script`, appended after the host's `args`."""

    ps: list[Arg] = []
    worker: list[Arg] = []
    chief: list[Arg] = []


class TaskEnvSpec(_Strict):
    """`job.task_env`: per task type, set over `defaults.env` and the host's `env`."""

    ps: Env = {}
    worker: Env = {}
    chief: Env = {}
    evaluator: Env = {}
    tensorboard: Env = {}


class JobSpec(_Strict):
    """`job:`. `strategy` says what the script does with the cluster, and so which of
    TensorFlow's rules the plan enforces; it implies `style` (flags → flags; parameter_server,
    multi_worker_mirrored, custom → tf_config; mirrored → nothing handed over). A file without
    `strategy` gives only `style` (default tf_config) and is planned by it alone: nothing
    refused, but warned of the traps its style walks into (rules.py).
    `workers` defaults to per_gpu (per_host for mirrored).

    Overrides for a heterogeneous lab: a host's `args` follow `args` for its ps, workers and
    chief, and `task_args: {worker: [...]}` follow those for every task of that type; a task's
    env is `defaults.env`, then its host's `env`, then `task_env: {ps: {...}}` of its type.
    `ports.<type>: none` (strategy custom only) starts that type without a port.

    `script` may be left out where the job only says how one-off commands run (`tfctl run`
    takes its sync, setup, outputs...); `plan` and `up` then refuse it (plan.make_plan)."""

    script: Annotated[str, StringConstraints(min_length=1)] | None = None
    args: list[Arg] = []
    # How the processes find each other: TensorFlow's cluster (ps, workers, chief), or one
    # process group with torchrun's variables (torch) or JAX's and Keras 3's (jax): a name of
    # the registry (inventory/frameworks/ `FRAMEWORKS`), which the loader checks it against.
    framework: Any = "tensorflow"
    strategy: Strategy | None = None
    style: Literal["tf_config", "flags"] | None = None
    workers: Literal["per_gpu", "per_host"] | None = None
    chief: bool | str = False
    evaluator: EvaluatorSpec | None = None
    tensorboard: TensorBoardSpec | None = None
    ports: PortsSpec = PortsSpec()
    # Where `up` finds a free port for a task type `ports:` does not write (two runs share a host).
    port_range: str = "2220-2299"
    # Word when the run ends: a command on the chief's host, a POST to a webhook, or both.
    notify: NotifySpec | None = None
    sync: SyncSpec | Literal[False] = SyncSpec()
    setup: list[str] = []
    setup_inputs: list[str] = []
    # Folders (relative to the workdir) the job writes: created on every host before launch and
    # brought home by `tfctl collect`. Default: the TensorBoard logdir, else `out`.
    # `legacy`: tf.keras is Keras 2 (the tf_keras package, TF_USE_LEGACY_KERAS=1), for model.fit
    # code under multi-worker strategies on TF >= 2.16, where Keras 3 breaks it.
    keras: Literal["default", "legacy"] = "default"
    # Regexes whose first group is a training speed in a task's log line (default: the bundled
    # trainer's, TF1's global_step/sec, examples/sec and Keras' ms/step): recorded per worker.
    throughput: list[Annotated[str, StringConstraints(min_length=1)]] = []
    outputs: list[Annotated[str, StringConstraints(pattern=r"^[^\x00]+$")]] | None = None
    restart: RestartSpec = RestartSpec()
    # Seconds a host keeps its tasks running while it cannot reach the task whose end is the
    # job's (its port silent: a cut link, a switch rebooting); past it the host ends its part.
    silence_window: float = Field(default=600.0, ge=1, le=7 * 24 * 3600)
    # MB at which a task's log is rotated: `<task>.log` holds the newest output, `<task>.log.1`
    # the part before it, older output is dropped (a task's logs take at most twice this).
    log_max_mb: float = Field(default=256.0, gt=0, le=1 << 20)
    # MB: `check` warns when a host's workdir filesystem has less room than this.
    disk_floor_mb: float = Field(default=1024.0, ge=0)
    task_args: TaskArgsSpec = TaskArgsSpec()
    task_env: TaskEnvSpec = TaskEnvSpec()

    @field_validator("port_range")
    @classmethod
    def _port_range(cls, value: str) -> str:
        port_range(value)
        return value


def _matching(pattern: str, what: str) -> Any:
    """A field validator refusing a value that does not match `pattern`, saying `what` it is."""
    regex = re.compile(pattern)

    def check(cls: type, value: object) -> object:
        values = value if isinstance(value, list) else [value]
        for v in values:
            if isinstance(v, str) and not regex.fullmatch(v):
                raise ValueError(what)
        return value

    return classmethod(check)


_WORD = r"[^-\s][^\s]*"
_DNS_LABEL = r"[a-z0-9]([a-z0-9-]*[a-z0-9])?"
# Slurm's time limits: minutes, MM:SS, H:MM:SS, D-H, D-H:MM, D-H:MM:SS, or UNLIMITED.
_SLURM_TIME = r"\d+(:\d\d?){0,2}|\d+-\d+(:\d\d?){0,2}|UNLIMITED|unlimited|infinite"


class SlurmSpec(_Strict):
    """`slurm:` (optional): what `export slurm` asks Slurm for, and where `up --on slurm`
    submits it (`host`, `workdir`). Without `nodes` and `gpus_per_node` the job asks for one
    node per host and the most GPUs a host has."""

    host: str = Field(default="local", min_length=1)
    partition: str | None = None
    account: str | None = None
    time: str | None = None
    nodes: int | None = Field(default=None, ge=1, le=100000)
    gpus_per_node: int | None = Field(default=None, ge=0, le=64)
    sbatch_args: list[str] = []
    workdir: str | None = Field(default=None, min_length=1)

    _words = field_validator("host", "partition", "account")(
        _matching(_WORD, "a name without spaces, not starting with `-`"))
    _time = field_validator("time")(
        _matching(_SLURM_TIME, "a Slurm time limit is minutes, H:MM:SS or D-HH:MM:SS"))
    _args = field_validator("sbatch_args")(
        _matching(r"--?[A-Za-z][^\n\x00]*", "each entry is one sbatch option, e.g. "
                  "`--exclusive` or `--constraint=a100`"))
    _workdir = field_validator("workdir")(
        _matching(r"[^\s\x00]+", "a folder path without spaces"))


class KubernetesSpec(_Strict):
    """`kubernetes:` (optional): what `tfctl export tfjob` needs that the lab does not say."""

    image: str | None = None
    namespace: str = "default"
    # The TFJob's name (default: the inventory's); pods are `<name>-worker-<i>`, so it is short.
    name: str | None = Field(default=None, max_length=48)
    python: str = "python3"
    workdir: str | None = None
    # A PersistentVolumeClaim mounted at `workdir` in every pod: where the outputs go.
    claim: str | None = None
    on_failure: Literal["OnFailure", "ExitCode"] = "OnFailure"

    _words = field_validator("image", "python")(
        _matching(_WORD, "a name without spaces, not starting with `-`"))
    _labels = field_validator("namespace", "name", "claim")(
        _matching(_DNS_LABEL, "Kubernetes takes lower-case letters, digits and `-` here "
                  "(a DNS label)"))
    _workdir = field_validator("workdir")(
        _matching(r"/[^\x00]*", "the folder in the container is an absolute path"))

    @model_validator(mode="after")
    def _claim_needs_workdir(self) -> KubernetesSpec:
        if self.claim is not None and self.workdir is None:
            raise ValueError("`claim` is mounted at `workdir`, which is missing")
        return self


# What to write instead, by key, for a mistake under `slurm:` or `kubernetes:` (load.py).
ENGINE_HINTS = {
    "slurm": "e.g. `slurm: {partition: gpu, time: \"2:00:00\"}` (README: When you outgrow the lab)",
    "kubernetes": "e.g. `kubernetes: {image: registry.example.org/you/train:1, workdir: "
                  "/workspace, claim: train-data}`",
    "time": 'write a time limit as Slurm takes it, in quotes (YAML reads 2:00:00 as a number): '
            '`time: "2:00:00"` or `"1-12:00:00"`',
    "nodes": "write how many nodes to ask for, e.g. `nodes: 2` (default: one per host)",
    "gpus_per_node": "write a count, e.g. `gpus_per_node: 4` (default: the most a host has)",
    "sbatch_args": "write a list of sbatch options, e.g. `sbatch_args: [--exclusive, --mem=0]`",
    "namespace": "write a namespace such as `namespace: ml-team`",
    "name": "write a short DNS label, e.g. `name: mnist-ps`",
    "claim": "write the PersistentVolumeClaim's name, e.g. `claim: train-data`",
    "workdir": "write a path, e.g. `workdir: /workspace`",
    "on_failure": "write `on_failure: OnFailure` (any failure restarts) or `ExitCode` (only "
                  "kills, 128-255, restart)",
}


class FileSpec(_Strict):
    name: str = Field(min_length=1, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
    defaults: DefaultsSpec = DefaultsSpec()
    hosts: list[HostSpec] = []
    hostfile: str | None = None
    # No `job:`: the hosts serve one-off commands (`tfctl run -- CMD`) and nothing else.
    job: JobSpec | None = None
    slurm: SlurmSpec | None = None
    kubernetes: KubernetesSpec | None = None
