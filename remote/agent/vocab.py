"""The agent's vocabulary: every request tfctl sends a host's agent and every answer it reads.

Part of the agent program (`__init__.py`): stdlib only, Python >= 3.8, no tfctl imports. The same
classes are the client's (`connect/session/agentops.py` builds the requests and reads the
answers with them) and the agent's (its `op_*` functions read the requests and answer with
them), so a field is written once, here, and both sides agree on its name, its default and its
shape.

Each record is a `Wire` (wirerecord.py: how a record is declared, read and written).

`WIRE_VERSION` (wire.py) travels in every request and every answer: an agent that finds another
version in a request refuses it (kind `wire_version`) without acting on it, and the client tells
an answer of another version apart (`errors.AgentOutdated`).
"""

# The records' tables (WIRE_NAMES, NESTED, REQUIRED) are class attributes without annotations:
# an annotated one would be taken for a field. They are never mutated.
# ruff: noqa: RUF012

from __future__ import annotations

from typing import Any

from tfctl.remote.agent.wirerecord import BY_NAME, MANY, ONE, Wire, field

# ---------------------------------------------------------------- a task

class TaskRecord(Wire):
    """One task of a run: what the plan made of it (as the run's manifest carries it: name, host,
    port, mask) and what its host's agent sees of it now (state, processes, exit, log).

    The agent answers each task's record whole (`status`), built from the manifest's task by
    field name: a field the plan gives a task (`inventory/tasks.py` `Task.to_json`) and this
    record declares travels to `tfctl status` without another line of code."""

    WIRE_NAMES = {"mask": "cuda_visible_devices", "host_restarted_at_s": "host_restarted_at"}

    name: str = ""
    host: str = ""
    state: str = "lost"
    """running | starting | not_started | exited | killed | stopped | lost (| unreachable)"""
    pid: int | None = None
    exit_code: int | None = None
    signal: str | None = None
    uptime_s: float | None = None
    restarts: int = 0
    mask: str | None = None
    """The task's CUDA_VISIBLE_DEVICES ("" for CPU-only tasks; None where not known)."""
    last_lines: tuple[str, ...] = ()
    """The log's last lines, as many as the status read asked for (`tail`; more for a task
    that failed, whose error line is above its stack frames)."""
    host_restarted_at_s: float | None = None
    """When the host restarted, for a task lost to that restart (its records are of an earlier
    boot); None otherwise. Such a task waits for `tfctl restart`."""
    type: str = ""
    index: int = -1
    port: int | None = None
    pgid: int | None = None
    supervisor_pid: int | None = None
    pids: tuple[int, ...] = ()
    """Every live process of the task (children that left its group included)."""
    listening_pid: int | None = None
    error: str | None = None
    started_at: float | None = None
    ended_at: float | None = None
    last_exit: dict[str, Any] | None = None
    """How the task's previous process ended, where its restart policy started it again."""
    log_size_bytes: int = 0
    cwd: str | None = None
    """The task's working directory, where its process starts: the plan's (`Task.cwd`, its
    host's workdir), as the manifest carries it; a relative one is under the workdir."""
    session: str = ""
    """`notebook` or `shell` for a session's task (a run kind: `tfctl notebook`, `tfctl
    shell`), "" for any other run's; the lab policy's `applies_to` tells them apart
    (agent/policy.py)."""

    def __post_init__(self) -> None:
        if not self.type and ":" in self.name:  # a record that names the task only
            kind, _, index = self.name.partition(":")
            object.__setattr__(self, "type", kind)
            object.__setattr__(self, "index", int(index) if index.isdigit() else -1)


# ---------------------------------------------------------------- the host itself

class PortState(Wire):
    """One port on a host: free, or the process listening on it where this user may see it."""

    port: int = 0
    free: bool = True
    pid: int | None = None
    pgid: int | None = None
    user: str | None = None
    cmdline: list[str] | None = None
    tfctl_run_id: str | None = None
    """The tfctl run whose task holds it, if any."""
    tfctl_task: str | None = None

    @property
    def run_id(self) -> str | None:
        return self.tfctl_run_id

    @property
    def task(self) -> str | None:
        return self.tfctl_task

    @property
    def raw(self) -> dict[str, Any]:
        """The port's record as the wire has it (what `runs.check.describe_holder` reads)."""
        return self.to_wire()


class PortsRequest(Wire):
    """Whether these ports are free (op `ports`), free ports to choose, or leases to drop."""

    ports: tuple[int, ...] = ()
    choose: dict[str, Any] | None = None
    """Ports to choose for the tasks `job.ports` writes none for (agent/freeports.py)."""
    release: str | None = None
    """The lease token of an `up` that will not start: its leases go."""


class PortsAnswer(Wire):
    """Each port asked about (`PortState`), and the ports chosen where asked."""

    NESTED = {"ports": (MANY, PortState)}

    ports: tuple[PortState, ...] = ()
    choose: dict[str, Any] | None = None
    """{"chosen": {task: port}, "short": [tasks no free port was left for]}."""


class ListenRequest(Wire):
    """Hold these ports open for `seconds` in a detached listener (op `listen`)."""

    ports: tuple[int, ...] = ()
    seconds: float = 10.0


class ConnectRequest(Wire):
    """TCP connects from the host to each `address:port` (op `connect`)."""

    targets: tuple[str, ...] = ()
    timeout_s: float = 3.0


class ProbeRequest(Wire):
    """What the host has (op `probe`); `ask_tf`: what TensorFlow says of itself too; `ask`:
    what these other frameworks say of themselves (torch, jax: fwprobe.py)."""

    workdir: str | None = None
    ask_tf: bool = False
    fresh: bool = False
    ask: tuple[str, ...] = ()
    ask_hostname: bool = False
    """Also what the host's own name resolves to there (`ProbeAnswer.hostname_addresses`)."""


class ProcsRequest(Wire):
    """Who each of these pids is (op `procs`)."""

    pids: tuple[int, ...] = ()


class ProcsAnswer(Wire):
    """Who each pid is (op `procs`): user, command, tfctl run and task; None for a pid gone."""

    procs: dict[str, dict[str, Any] | None] = field(default_factory=dict)
    """pid (a string, as JSON keys are) → what /proc says of it (`proc.describe_process`)."""


class ProbeAnswer(Wire):
    """What the host has (op `probe`): its Python, TensorFlow, nvidia-smi, rsync, the workdir."""

    tensorflow: dict[str, Any] | None = None
    """What TensorFlow says of itself (tfprobe.py), where the request asked (`ask_tf`)."""
    tf_distributions: dict[str, str] = field(default_factory=dict)
    """Each TensorFlow distribution installed → its version."""
    python: str = ""
    executable: str = ""
    tf_version: str | None = None
    nvidia_smi: str | None = None
    """Where nvidia-smi is on the PATH (None: not there)."""
    home: str = ""
    workdir: str | None = None
    """The workdir, expanded on the host."""
    workdir_free_bytes: int | None = None
    hostname: str = ""
    rsync: str | None = None
    """Where rsync is on the PATH (None: not there)."""
    user: str | None = None
    uid: int | None = None
    configured_python_missing: bool = False
    """The inventory's `python:` does not exist there (the agent runs on the host's python3)."""
    framework_versions: dict[str, str] = field(default_factory=dict)
    """Where the request asked about other frameworks: each of torch, jax, jaxlib and keras
    installed → its version (fwprobe.py)."""
    frameworks: dict[str, dict[str, Any]] = field(default_factory=dict)
    """What each framework the request asked about (`ask`) says of itself (fwprobe.py)."""
    hostname_addresses: tuple[str, ...] = ()
    """What `hostname` resolves to there, where the request asked (`ask_hostname`): a
    loopback address is what gloo would advertise (netroute.py)."""


class ListenAnswer(Wire):
    """The ports a detached listener holds for a while (op `listen`), for peers to try."""

    bound: tuple[int, ...] = ()
    busy: dict[str, str] = field(default_factory=dict)
    """port → why it could not be bound."""
    pid: int | None = None
    """The listener's process (None: no port was bound)."""


class ConnectResult(Wire):
    """One TCP connect from the host to `address:port`."""

    target: str = ""
    ok: bool = False
    error: str | None = None
    why: str | None = None
    """unresolved (no address for the name: no firewall is to blame) | refused | timeout |
    error; None when it connected."""
    elapsed_ms: float | None = None


class ConnectAnswer(Wire):
    """Each connect the host tried (op `connect`), in the request's order."""

    NESTED = {"targets": (MANY, ConnectResult)}

    targets: tuple[ConnectResult, ...] = ()


# ---------------------------------------------------------------- sync

class SyncDiff(Wire):
    """Which listed paths differ in the host's workdir (op `sync_diff`, which also creates it)."""

    WIRE_NAMES = {"has_rsync": "rsync"}

    dest: str = ""
    """The workdir, expanded on the host."""
    has_rsync: bool = False
    count: int | None = None
    """How many differ (None: not known, e.g. the agent could not run)."""
    differ: tuple[str, ...] | None = None
    """Those paths, or None when there are too many to list (rsync the whole tree)."""


class SyncDiffRequest(Wire):
    """Which of the listed paths differ in the workdir (op `sync_diff`)."""

    REQUIRED = ("workdir", "entries")

    workdir: str | None = None
    entries: str | None = None
    """[path, signature] as JSON, zlib, base64 (remote/sync/rsync.py, `SourceListing`)."""


class PutFilesRequest(Wire):
    """Small files written under the workdir in one request (op `put_files`)."""

    REQUIRED = ("workdir", "files")

    workdir: str | None = None
    files: Any = None


class PutAnswer(Wire):
    """What `put_files` wrote, or why it refused."""

    written: tuple[str, ...] = ()
    bytes: int = 0
    refused: str | None = None


# ---------------------------------------------------------------- a run's life

class PrepareRequest(Wire):
    """Make the run's directory and write its manifest (op `prepare`)."""

    REQUIRED = ("workdir", "run_id", "manifest")

    workdir: str | None = None
    run_id: str | None = None
    manifest: dict[str, Any] | None = None


class PrepareAnswer(Wire):
    """The run prepared, and its directory on the host."""

    run_id: str = ""
    run_dir: str = ""


class TaskPid(Wire):
    """A started task's process and process group."""

    pid: int = 0
    pgid: int = 0


class LaunchRequest(Wire):
    """Start tasks of a prepared run under its keeper (op `launch`)."""

    REQUIRED = ("workdir", "run_id")

    workdir: str | None = None
    run_id: str | None = None
    tasks: list[str] | None = None
    """The tasks to start (every task of the run when None)."""


class LaunchAnswer(Wire):
    """The tasks started, the run's keeper (keeper.py), and a claim not left (a warning)."""

    NESTED = {"tasks": (BY_NAME, TaskPid)}

    tasks: dict[str, TaskPid] = field(default_factory=dict)
    keeper_pid: int | None = None
    claim_warning: str | None = None


class RestartLostAnswer(Wire):
    """The lost tasks a host started again (op `restart_lost`), and the run's keeper there."""

    NESTED = {"tasks": (BY_NAME, TaskPid)}
    WIRE_NAMES = {"host_restarted_at_s": "host_restarted_at"}

    tasks: dict[str, TaskPid] = field(default_factory=dict)
    keeper_pid: int | None = None
    host_restarted_at_s: float | None = None
    """When the host restarted, if that is how (some of) the tasks were lost."""
    claim_warning: str | None = None
    taken_back: tuple[str, ...] = ()
    """Tasks found running with no keeper (theirs was killed), taken back by a new one."""


class StartState(Wire):
    """How a starting task is doing after a wait for its port."""

    name: str = ""
    state: str = "timeout"
    """"listening" | "running" | "exited" | "killed" | "stopped" | "lost" | "timeout" """
    exit_code: int | None = None
    signal: str | None = None
    error: str | None = None
    port: int | None = None
    port_holder: dict[str, Any] | None = None
    """Who holds the port of a task that timed out (a `PortState` as the wire has it)."""
    last_lines: tuple[str, ...] = ()
    pid: int | None = None

    @property
    def started(self) -> bool:
        """Listening (or running without a port), or already done with success."""
        return self.state in ("listening", "running") or (
            self.state == "exited" and self.exit_code == 0)


class WaitPortsRequest(Wire):
    """Wait for tasks to listen on their ports or end (op `wait_ports`)."""

    REQUIRED = ("workdir", "run_id")

    workdir: str | None = None
    run_id: str | None = None
    tasks: list[str] | None = None
    timeout_s: float = 30.0


class WaitPortsAnswer(Wire):
    """Each task's state after the wait, and whether all of them started."""

    NESTED = {"tasks": (BY_NAME, StartState)}

    tasks: dict[str, StartState] = field(default_factory=dict)
    ready: bool = False


class StatusRequest(Wire):
    """One host's view of a run (op `status`), with `tail` log lines per task."""

    REQUIRED = ("workdir",)

    workdir: str | None = None
    run_id: str | None = None
    """The run (the host's newest when None)."""
    tail: int = 1


class StatusAnswer(Wire):
    """One host's view of a run (op `status`): each of its tasks' records, and the run's."""

    NESTED = {"tasks": (MANY, TaskRecord)}

    run_id: str = ""
    run_dir: str = ""
    tasks: tuple[TaskRecord, ...] = ()
    finished: dict[str, Any] | None = None
    live: bool = False
    created_at: float | None = None
    inventory: str | None = None
    hostname: str | None = None
    silences: tuple[dict[str, Any], ...] = ()
    """What the run's watcher there cannot reach now (agent/watch.py): task, since, why."""
    records: dict[str, Any] | None = None
    """Since when and why the run's records stopped there (agent/disk.py), or None."""
    idle: dict[str, Any] | None = None
    """The run's GPUs idle under the lab policy there, once its owner was warned
    (agent/idlewatch.py `idle.json`: since, stop_at, below_util_pct, gpus), or None."""
    taken_back: dict[str, Any] | None = None
    """Tasks found running with no keeper there (theirs was killed), which this status read
    had a new keeper take back (agent/keeper.py): tasks, keeper_pid, gone_pid; or None."""

    def __post_init__(self) -> None:
        if any(not isinstance(t, TaskRecord) for t in self.tasks):  # records given as data
            object.__setattr__(self, "tasks", tuple(TaskRecord.from_wire(t) for t in self.tasks))


class StopRequest(Wire):
    """Stop a run's tasks on the host: TERM, grace, KILL, verify (op `stop`)."""

    REQUIRED = ("workdir", "run_id")

    workdir: str | None = None
    run_id: str | None = None
    tasks: list[str] | None = None
    """Only these tasks (the whole run when None)."""
    known_only: bool = False
    """Of `tasks`, only those that run here (other hosts' names are passed over)."""
    grace_s: float = 10.0


class StopAnswer(Wire):
    """What stopping (part of) a run on one host did (op `stop`), verified by the agent."""

    stopped: tuple[str, ...] = ()
    killed_after_grace: tuple[str, ...] = ()
    """Tasks that needed SIGKILL after the grace period."""
    remaining_pids: tuple[int, ...] = ()
    """The run's processes still alive after SIGKILL (should be none)."""
    gpu_pids: tuple[int, ...] = ()
    """Of the run's processes, those nvidia-smi still shows holding GPU memory."""
    gpu_error: str | None = None

    @property
    def clean(self) -> bool:
        return not self.remaining_pids and not self.gpu_pids


class FinishRequest(Wire):
    """Record how the run ended on the host (op `finish`)."""

    REQUIRED = ("workdir", "run_id")

    workdir: str | None = None
    run_id: str | None = None
    status: dict[str, Any] | None = None
    """How the run ended: {"state", "exit_code", "cause"}."""


class FinishAnswer(Wire):
    """How the run ended, as the host recorded it in the run's `finished.json` (op `finish`)."""

    status: dict[str, Any] | None = None
    finished_at: float | None = None


class RunsRequest(Wire):
    """The runs the host's workdir holds (op `runs`)."""

    REQUIRED = ("workdir",)

    workdir: str | None = None
    energy: bool = False
    """Answer each run's `gpu_costs` too (energy.py): read from gpu.csv, so only when asked."""


class GpuCost(Wire):
    """What one GPU of the host cost a run (energy.py says how each number is found)."""

    index: int = 0
    name: str = ""
    held_s: float = 0.0
    """How long the run's tasks held it (GPU-hours: / 3600)."""
    energy_wh: float | None = None
    """The board's energy while held; None when unknown (`energy_unknown` says why), never 0."""
    energy_unknown: str | None = None
    unsampled_s: float | None = None
    """Seconds of the hold without a power reading: where > 0, energy_wh is a lower bound."""
    shared_with: tuple[str, ...] = ()
    """Other owners seen on it while held (`run:<id>:<task>`, `foreign:<user>`): the board is
    measured whole, so energy_wh includes theirs."""


class RunRecord(Wire):
    """One run a host's workdir holds (op `runs`)."""

    NESTED = {"gpu_costs": (MANY, GpuCost)}

    run_id: str = ""
    live: bool = False
    created_at: float | None = None
    tasks: tuple[str, ...] = ()
    run_dir: str = ""
    inventory: str | None = None
    outputs: tuple[str, ...] = ()
    finished: dict[str, Any] | None = None
    gpu_costs: tuple[GpuCost, ...] | None = None
    """Each GPU the run held here, what it cost; None unless the request asked for `energy`."""
    oneoff: dict[str, Any] | None = None
    """A one-off command's run (`tfctl run`): its command, name, sweep and point; else None."""
    framework: str | None = None
    """The framework of the inventory's job the run is (tensorflow, torch, jax); None for a
    one-off command's run, or one an older tfctl started."""
    session: str = ""
    """`notebook` or `shell` for a session (the manifest's `session`), "" for any other run."""


class RunsAnswer(Wire):
    """The runs of a host's workdir (op `runs`)."""

    NESTED = {"runs": (MANY, RunRecord)}

    runs: tuple[RunRecord, ...] = ()
    """Newest first."""


class RunRef(Wire):
    """A request about one run of the host: `up_mark`, `restart_lost` (with `tasks`)."""

    REQUIRED = ("workdir", "run_id")

    workdir: str | None = None
    run_id: str | None = None
    tasks: list[str] | None = None


# ---------------------------------------------------------------- logs

class LogChunk(Wire):
    """A piece of a task's log, read from an offset (or its last lines)."""

    data: str = ""
    offset: int = 0
    """Where the next read of this log starts."""
    reset: bool = False
    """The log was truncated or replaced since the offset asked for."""
    size: int | None = None


class LogsRequest(Wire):
    """Each task's log from an offset, or its last lines (op `logs`)."""

    REQUIRED = ("workdir", "run_id")

    workdir: str | None = None
    run_id: str | None = None
    offsets: dict[str, int] | None = None
    """task → where to read its log from (a negative offset: its last `tail_lines`)."""
    tasks: list[str] | None = None
    max_bytes: int = 65536
    tail_lines: int | None = None


class LogsAnswer(Wire):
    """Each task's piece of log, by task name."""

    NESTED = {"logs": (BY_NAME, LogChunk)}

    logs: dict[str, LogChunk] = field(default_factory=dict)


# ---------------------------------------------------------------- the lab and its queue

class HostUser(Wire):
    """Who tfctl is on the host: the login's uid and user name."""

    uid: int | None = None
    user: str | None = None


class ClaimsRequest(Wire):
    """The host's claims (op `claims`): it names nothing."""


class ClaimsAnswer(Wire):
    """The host's claims (op `claims`, and `up_check` where a task uses GPUs), with their state;
    ours that were stale or expired are removed first."""

    NESTED = {"me": (ONE, HostUser)}

    me: HostUser | None = None
    claims: tuple[dict[str, Any], ...] = ()
    """Each claim as docs/claims.md writes it, with its file, owner (uid, user) and `state`."""
    warnings: tuple[str, ...] = ()
    """One per file of the claims folder that was skipped, and why."""
    removed: tuple[str, ...] = ()
    """Our claims' files removed (stale or expired)."""
    now: float | None = None
    """The host's clock when it read them."""


class LabRequest(Wire):
    """Everything `tfctl lab` shows of a host (op `lab`), its idle sampler kept going."""

    REQUIRED = ("workdir",)

    workdir: str | None = None
    sample_s: float | None = None
    """How often the idle sampler samples (None: lab.py's SAMPLE_S)."""
    linger_s: float | None = None
    """How long it samples after this request (None: lab.py's LINGER_S)."""


class LabPolicyRequest(Wire):
    """The lab policy in force on the host (op `lab_policy`): it names nothing."""


class LabPolicy(Wire):
    """The lab policy of a host (op `lab_policy`; agent/policy.py `read_policy`)."""

    path: str = ""
    """The file read: `$TFCTL_LAB_POLICY` of the host's environment, else /etc/tfctl/lab.yaml."""
    found: bool = False
    policy: dict[str, Any] | None = None
    """The policy in force (`{"idle": {...}}`), or None: no file, or the file is ignored."""
    ignored: str | None = None
    """Why the file is ignored, one sentence naming it (and the line), or None."""
    owner: str | None = None
    problems: tuple[str, ...] = ()
    """One sentence per rule of the policy left out (its line, why); the others apply."""


class GpuStateRequest(Wire):
    """What placement and a waiting job read of a host (op `gpu_state`)."""

    tickets: bool = False
    """The queue's tickets too."""
    beat: str | None = None
    """Our ticket to refresh first (its id)."""
    stale_s: float | None = None
    """A ticket not refreshed for this long is stale (None: tickets.py's TICKET_STALE_S)."""


class GpuState(ClaimsAnswer):
    """A host's GPUs, who computes on them, and the claims (ops `lab` and `gpu_state`): `lab`
    adds the idle sampler's measure and the host's name, `gpu_state` the queue's tickets where
    asked."""

    hostname: str | None = None
    gpus: tuple[dict[str, Any], ...] = ()
    """nvidia-smi's GPUs: index, uuid, memory_used_mib, memory_total_mib, utilization_pct, name."""
    apps: tuple[dict[str, Any], ...] = ()
    """nvidia-smi's compute apps: gpu_uuid, pid, used_memory_mib."""
    error: str | None = None
    """Why the GPUs could not be read (no nvidia-smi, it failed), or None."""
    procs: dict[str, dict[str, Any] | None] = field(default_factory=dict)
    """pid → who the compute app is (lab.py's `describe_holder`; None: gone)."""
    idle: dict[str, Any] | None = None
    """The idle sampler's measure (op `lab`): sampled_at, watching_since, sample_s, low_since."""
    tickets: tuple[dict[str, Any], ...] = ()
    """The queue's tickets, oldest first, each with its `state` (where the request asked)."""
    ticket_warnings: tuple[str, ...] = ()
    week_held: dict[str, list[float]] = field(default_factory=dict)
    """(op `lab`) user → [GPU-seconds held, of them idle] on this host in the last 7 days, from
    the ledger (ledger.py)."""
    ledger_warnings: tuple[str, ...] = ()
    """(op `lab`) one per owner whose ledger files were skipped, and why."""
    queue_rule: dict[str, Any] | None = None
    """The lab policy's `queue` rule on this host (`{order, half_life_s}`; None: fifo), where
    the request asked for the tickets."""
    limits: dict[str, Any] | None = None
    """The lab policy's `limits` on this host (`{gpus_per_user, max_reserve_s,
    exceed_when_nobody_waits}`), or None."""
    recent_use: dict[str, float] = field(default_factory=dict)
    """User → GPU-hours used recently on this host, decayed with the queue's half-life
    (agent/recentuse.py), where the queue's order is fair."""


class UsageRequest(Wire):
    """What the host's GPUs were used for since a time (op `usage`, ledger.py)."""

    REQUIRED = ("since_s",)
    WIRE_NAMES = {"since_s": "since"}

    since_s: float | None = None
    """The window's start (epoch seconds, the client's clock; the host counts whole hours)."""


class UsageAnswer(Wire):
    """The host's ledger in the window (op `usage`): a row per user, kind (run, session,
    other), run or process, GPU and hour."""

    rows: tuple[dict[str, Any], ...] = ()
    """{user, kind, id, job, gpu, index, hour, held_s, idle_s, energy_j, power_s}."""
    warnings: tuple[str, ...] = ()
    """One per owner whose ledger files were skipped, and why."""
    now: float | None = None
    """The host's clock when it read them."""
    idle_below_pct: float | None = None
    """The utilization under which a held GPU counted as idle."""


class ReserveRequest(Wire):
    """Reserve GPUs of the host until a time (op `reserve`)."""

    REQUIRED = ("gpus", "until_s")
    WIRE_NAMES = {"until_s": "until"}

    gpus: tuple[int, ...] | None = None
    until_s: float | None = None
    """The reservation's end (epoch seconds)."""
    note: str | None = None
    force: bool = False
    """Reserve even where another user's reservation stands."""
    host: str | None = None
    """The host's name in the inventory, written into the claims."""
    held_elsewhere: int = 0
    """The GPUs we hold on the inventory's other hosts: the lab policy's GPUs per user count
    them too."""


class ReserveAnswer(Wire):
    """The GPUs reserved (op `reserve`), and the other users' claims on them (with `force`)."""

    NESTED = {"me": (ONE, HostUser)}
    WIRE_NAMES = {"until_s": "until"}

    reserved: tuple[int, ...] = ()
    until_s: float | None = None
    note: str | None = None
    others: tuple[dict[str, Any], ...] = ()
    """Another user's live claim on a GPU reserved: gpu, user, run_id, kind, until."""
    me: HostUser | None = None
    warnings: tuple[str, ...] = ()


class ReleaseRequest(Wire):
    """Remove our reservations of GPUs of the host (op `release`)."""

    REQUIRED = ("gpus",)

    gpus: tuple[int, ...] | None = None


class ReleaseAnswer(Wire):
    """Our reservations removed (op `release`), and the GPUs another user reserved."""

    NESTED = {"me": (ONE, HostUser)}

    released: tuple[int, ...] = ()
    not_reserved: tuple[int, ...] = ()
    """GPUs we had no reservation of."""
    others: tuple[dict[str, Any], ...] = ()
    """Another user's reservation of a GPU named: gpu, user, until (not ours to remove)."""
    me: HostUser | None = None
    warnings: tuple[str, ...] = ()


class TicketRequest(Wire):
    """Our queue ticket on the host: left or refreshed (op `ticket_put`: for `gpus` or `count`
    free GPUs), or removed (op `ticket_drop`: only `ticket_id`)."""

    REQUIRED = ("ticket_id",)
    WIRE_NAMES = {"ticket_id": "id"}

    ticket_id: str | None = None
    job: str | None = None
    gpus: tuple[int, ...] | None = None
    count: int | None = None
    client: str | None = None
    """Where the waiting client runs (its host), shown to the other users."""


class TicketPutAnswer(Wire):
    """Our ticket's place in the queue (op `ticket_put`): when it was queued, by the host's
    clock, kept when a ticket is refreshed."""

    queued: float | None = None
    now: float | None = None


class TicketDropAnswer(Wire):
    """Whether our ticket was removed (op `ticket_drop`; not there or not ours: False)."""

    dropped: bool = False


# ---------------------------------------------------------------- `up` in two requests per host

class UpCheckRequest(Wire):
    """Everything `up` asks of a host before it starts anything (op `up_check`)."""

    REQUIRED = ("workdir",)

    workdir: str | None = None
    entries: str | None = None
    """The synced tree's digests (as `sync_diff` takes them; None: no sync asked)."""
    setup: dict[str, Any] | None = None
    """{"digest", "inputs"} of `job.setup` (None: no setup asked)."""
    gpus_script: str | None = None
    ports: tuple[int, ...] = ()
    choose: dict[str, Any] | None = None
    ask_hostname: bool = False
    """Also the host's name and what it resolves to there (a JAX job across hosts)."""


class UpCheck(Wire):
    """Everything `up` must know of one host before anything starts anywhere (op `up_check`)."""

    NESTED = {"sync": (ONE, SyncDiff), "ports": (MANY, PortState),
              "claims": (ONE, ClaimsAnswer)}
    WIRE_NAMES = {"chosen": "choose"}

    sync: SyncDiff | None = None
    """What differs of the synced tree (None: no sync asked)."""
    setup: dict[str, Any] | None = None
    """{"cached": bool, "hash", "log", "done_at"} (None: no setup asked)."""
    gpus_stdout: str | None = None
    """The busy-GPU program's output (None: no GPU task here)."""
    ports: tuple[PortState, ...] = ()
    claims: ClaimsAnswer | None = None
    """The host's claims, as op `claims` answers (None: no GPU task here)."""
    chosen: dict[str, Any] | None = None
    """The free ports for the tasks whose port is chosen at up (None: none asked), as
    op `ports` answers `choose`."""
    gpus_error: str | None = None
    hostname: str | None = None
    """The host's name, where the request asked (`ask_hostname`)."""
    hostname_addresses: tuple[str, ...] = ()
    """What `hostname` resolves to there (netroute.py)."""
    limits: dict[str, Any] | None = None
    """The lab policy's `limits` on this host (where a GPU task is asked about), or None."""
    waiting: str | None = None
    """Another user's job waiting in this host's queue (`bob's q-…`), or None."""


class UpGoRequest(Wire):
    """One round of a host's start (op `up_go`): prepare, launch, wait, status."""

    REQUIRED = ("workdir", "run_id")

    workdir: str | None = None
    run_id: str | None = None
    manifest: dict[str, Any] | None = None
    """The run's manifest: prepare the run first (None: it is prepared)."""
    setup_log: str | None = None
    launch: tuple[str, ...] = ()
    wait: tuple[str, ...] = ()
    timeout_s: float = 2.0
    status: int | None = None
    """With every task up, answer the host's status with this many log lines (None: none)."""
    verify_ports: tuple[int, ...] = ()
    lease_token: str | None = None


class UpGo(Wire):
    """One round of a host's start (op `up_go`): the tasks settled, and with every task of the
    host up in the last phase, its status."""

    NESTED = {"waited": (BY_NAME, StartState), "status": (ONE, StatusAnswer),
              "pids": (BY_NAME, TaskPid)}

    waited: dict[str, StartState] = field(default_factory=dict)
    status: StatusAnswer | None = None
    pids: dict[str, TaskPid] | None = None
    keeper_pid: int | None = None
    claim_warning: str | None = None
    at: float | None = None



class UpMark(Wire):
    """`up` verified the whole run (op `up_mark`): when the host recorded it for the watcher."""

    up_at: float | None = None
