"""One typed client function per agent operation: arguments in, a dataclass out.

`agentclient.call(transport, op, args)` speaks the wire (raw op names, raw dicts); the rest of
tfctl calls these instead, so an op's name, its arguments and the shape of its answer are
written down once, here, beside the agent's `op_*` functions (remote/agent/main.py).
Raw records the agent passes through unchanged (a task's status, a port holder) stay mappings
inside the answers, read by the modules that interpret them (`runs.status`, `runs.check`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tfctl.remote.connect import agentclient
from tfctl.remote.connect.transport import Transport

Raw = Mapping[str, Any]


# ---------------------------------------------------------------- preflight

def probe(t: Transport, workdir: str, ask_tf: bool = False) -> dict[str, Any]:
    """What the host has (python, TensorFlow, nvidia-smi, disk, the workdir) (op `probe`); the
    answer is read item by item by `runs.check`. `ask_tf`: also what TensorFlow says of itself
    (version, package, the GPUs it sees), asked once per interpreter and cached on the host."""
    answer: dict[str, Any] = agentclient.call(t, "probe", {"workdir": workdir, "ask_tf": ask_tf},
                                              timeout_s=240.0 if ask_tf else 60.0)
    return answer


# ---------------------------------------------------------------- ports / port probe

@dataclass(frozen=True)
class PortState:
    """One port on a host: free, or who holds it (`raw` for `runs.check.describe_holder`)."""

    port: int
    free: bool
    run_id: str | None = None
    """The tfctl run whose task holds it, if any."""
    task: str | None = None
    raw: Raw = field(default_factory=dict)


def ports(t: Transport, numbers: Sequence[int]) -> list[PortState]:
    """Whether each port is free on the host and, if not, who holds it (op `ports`)."""
    answer = agentclient.call(t, "ports", {"ports": list(numbers)})
    return [PortState(int(s["port"]), bool(s.get("free")), s.get("tfctl_run_id"),
                      s.get("tfctl_task"), s) for s in answer["ports"]]


def choose_ports(t: Transport, ask: Raw) -> Raw:
    """Free ports for the tasks whose port is chosen at up (op `ports` with `choose`, agent
    freeports.py): {"chosen": {task: port}, "short": [tasks no free port was left for]}."""
    answer: Raw = agentclient.call(t, "ports", {"ports": [], "choose": dict(ask)})["choose"]
    return answer


def release_ports(t: Transport, token: str) -> None:
    """Drop the port leases of an `up` (`token`) that will not start (op `ports`, `release`)."""
    agentclient.call(t, "ports", {"ports": [], "release": token})


def listen(t: Transport, numbers: Sequence[int], seconds: float) -> dict[str, Any]:
    """Bind these ports for `seconds` in a background listener (op `listen`): bound, busy, pid."""
    answer: dict[str, Any] = agentclient.call(t, "listen", {"ports": list(numbers),
                                                            "seconds": seconds})
    return answer


def connect(t: Transport, targets: Sequence[str], timeout_s: float) -> list[Raw]:
    """Try TCP connects from the host to each `address:port` (op `connect`)."""
    answer = agentclient.call(t, "connect", {"targets": list(targets), "timeout_s": timeout_s})
    return list(answer["targets"])


# ---------------------------------------------------------------- a run's life

def prepare(t: Transport, workdir: str, run_id: str, manifest: Raw) -> str:
    """Create the run's directory and manifest (op `prepare`); the run directory."""
    answer = agentclient.call(t, "prepare", {"workdir": workdir, "run_id": run_id,
                                             "manifest": dict(manifest)})
    return str(answer["run_dir"])


@dataclass(frozen=True)
class TaskPid:
    pid: int
    pgid: int


@dataclass(frozen=True)
class LaunchAnswer:
    tasks: dict[str, TaskPid]
    watcher_pid: int | None = None


def launch(t: Transport, workdir: str, run_id: str, tasks: Sequence[str] | None = None
           ) -> LaunchAnswer:
    """Start these tasks of the prepared run (all when None) and its watcher (op `launch`)."""
    answer = agentclient.call(t, "launch", {"workdir": workdir, "run_id": run_id,
                                            "tasks": None if tasks is None else list(tasks)})
    return LaunchAnswer({n: TaskPid(int(p["pid"]), int(p["pgid"]))
                         for n, p in answer["tasks"].items()}, answer.get("watcher_pid"))


@dataclass(frozen=True)
class RestartLostAnswer:
    """The lost tasks a host started again (op `restart_lost`), and its watcher."""

    tasks: dict[str, TaskPid]
    watcher_pid: int | None = None
    host_restarted_at_s: float | None = None
    """When the host restarted, if that is how (some of) the tasks were lost."""


def restart_lost(t: Transport, workdir: str, run_id: str, tasks: Sequence[str] | None = None
                 ) -> RestartLostAnswer:
    """Start again these lost tasks of the run (every lost one of the host when None) with
    their records, and the run's watcher if it is gone (op `restart_lost`, agent/lost.py); the
    host refuses (RemoteError) a task that is not lost, or a run that has ended."""
    answer = agentclient.call(t, "restart_lost", {"workdir": workdir, "run_id": run_id,
                                                  "tasks": None if tasks is None else list(tasks)})
    return RestartLostAnswer({n: TaskPid(int(p["pid"]), int(p["pgid"]))
                              for n, p in answer["tasks"].items()}, answer.get("watcher_pid"),
                             answer.get("host_restarted_at"))


@dataclass(frozen=True)
class StartState:
    """How a starting task is doing after `wait_ports`."""

    name: str
    state: str
    """"listening" | "running" | "exited" | "timeout" | ..."""
    exit_code: int | None = None
    signal: str | None = None
    error: str | None = None
    port: int | None = None
    port_holder: Raw | None = None
    last_lines: tuple[str, ...] = ()

    @property
    def started(self) -> bool:
        """Listening (or running without a port), or already done with success."""
        return self.state in ("listening", "running") or (
            self.state == "exited" and self.exit_code == 0)


def wait_ports(t: Transport, workdir: str, run_id: str, tasks: Sequence[str], timeout_s: float,
               call_timeout_s: float | None = None) -> dict[str, StartState]:
    """Wait up to `timeout_s` for these tasks to listen on their ports or end (op `wait_ports`)."""
    answer = agentclient.call(t, "wait_ports", {"workdir": workdir, "run_id": run_id,
                                                "tasks": list(tasks), "timeout_s": timeout_s},
                              timeout_s=call_timeout_s if call_timeout_s is not None
                              else timeout_s + 30)
    return {name: _start_state(name, raw) for name, raw in answer["tasks"].items()}


def _start_state(name: str, raw: Raw) -> StartState:
    return StartState(name, str(raw.get("state")), raw.get("exit_code"), raw.get("signal"),
                      raw.get("error"), raw.get("port"), raw.get("port_holder"),
                      tuple(raw.get("last_lines") or ()))


@dataclass(frozen=True)
class StatusAnswer:
    """One host's view of a run (op `status`); `tasks` are the agent's task records."""

    run_id: str
    run_dir: str
    tasks: tuple[Raw, ...]
    finished: Raw | None = None
    live: bool = False
    created_at: float | None = None
    inventory: str | None = None
    hostname: str | None = None
    silences: tuple[Raw, ...] = ()
    """What the run's watcher there cannot reach now (agent/watch.py): task, since, why."""
    records: Raw | None = None
    """Since when and why the run's records stopped there (agent/disk.py), or None."""


def status(t: Transport, workdir: str, run_id: str | None, tail: int = 1,
           mark_up: bool = False) -> StatusAnswer:
    """Every task of the run on this host with `tail` last log lines (op `status`)."""
    args: dict[str, Any] = {"workdir": workdir, "run_id": run_id, "tail": tail}
    if mark_up:
        args["mark_up"] = True
    a = agentclient.call(t, "status", args)
    return StatusAnswer(a["run_id"], a["run_dir"], tuple(a.get("tasks", ())), a.get("finished"),
                        bool(a.get("live")), a.get("created_at"), a.get("inventory"),
                        a.get("hostname"), tuple(a.get("silences") or ()), a.get("records"))


@dataclass(frozen=True)
class StopAnswer:
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


def stop(t: Transport, workdir: str, run_id: str, tasks: Sequence[str] | None = None,
         grace_s: float = 10.0) -> StopAnswer:
    """TERM, grace, KILL, verify: the run's tasks on this host, or only those of `tasks` that
    run here (op `stop`; names of other hosts' tasks are passed over)."""
    a = agentclient.call(t, "stop", {"workdir": workdir, "run_id": run_id,
                                     "tasks": None if tasks is None else list(tasks),
                                     "known_only": True, "grace_s": grace_s},
                         timeout_s=grace_s + 60)
    return StopAnswer(tuple(a.get("stopped", ())), tuple(a.get("killed_after_grace", ())),
                      tuple(a.get("remaining_pids", ())), tuple(a.get("gpu_pids", ())),
                      a.get("gpu_error"))


def finish(t: Transport, workdir: str, run_id: str, record: Raw) -> None:
    """Record how the run ended on this host (op `finish`): `{"state": ..., ...}`."""
    agentclient.call(t, "finish", {"workdir": workdir, "run_id": run_id, "status": dict(record)})


@dataclass(frozen=True)
class RunRecord:
    run_id: str
    live: bool
    created_at: float | None = None
    tasks: tuple[str, ...] = ()


def runs(t: Transport, workdir: str) -> list[RunRecord]:
    """The runs this host's workdir holds, newest first (op `runs`)."""
    answer = agentclient.call(t, "runs", {"workdir": workdir})
    return [RunRecord(r["run_id"], bool(r.get("live")), r.get("created_at"),
                      tuple(r.get("tasks") or ())) for r in answer["runs"]]


# ---------------------------------------------------------------- logs, files, processes

@dataclass(frozen=True)
class LogChunk:
    data: str
    offset: int
    """Where the next read of this log starts."""
    reset: bool = False
    """The log was truncated or replaced since the offset asked for."""


def logs(t: Transport, workdir: str, run_id: str, offsets: Mapping[str, int],
         max_bytes: int, tail_lines: int | None = None) -> dict[str, LogChunk]:
    """Each task's log from its offset (or its last `tail_lines` lines) (op `logs`)."""
    args: dict[str, Any] = {"workdir": workdir, "run_id": run_id, "offsets": dict(offsets),
                            "max_bytes": max_bytes}
    if tail_lines is not None:
        args["tail_lines"] = tail_lines
    answer = agentclient.call(t, "logs", args)
    return {task: LogChunk(c["data"], int(c["offset"]), bool(c.get("reset")))
            for task, c in answer.get("logs", {}).items()}


@dataclass(frozen=True)
class SyncDiff:
    """Which listed paths differ in the host's workdir (op `sync_diff`, which also creates it)."""

    dest: str
    """The workdir, expanded on the host."""
    has_rsync: bool
    count: int | None
    """How many differ (None: not known, e.g. the agent could not run)."""
    differ: tuple[str, ...] | None = None
    """Those paths, or None when there are too many to list (rsync the whole tree)."""


def sync_diff(t: Transport, workdir: str, packed_entries: str, timeout_s: float = 60
              ) -> SyncDiff:
    a = agentclient.call(t, "sync_diff", {"workdir": workdir, "entries": packed_entries},
                         timeout_s=timeout_s)
    differ = a.get("differ")
    return SyncDiff(str(a["dest"]), bool(a.get("rsync")), a.get("count"),
                    None if differ is None else tuple(differ))


@dataclass(frozen=True)
class PutAnswer:
    written: tuple[str, ...]
    bytes: int
    refused: str | None = None


def put_files(t: Transport, dest: str, files: Any, timeout_s: float = 120) -> PutAnswer:
    """Write these packed files under `dest` on the host (op `put_files`)."""
    answer = agentclient.call(t, "put_files", {"workdir": dest, "files": files},
                              timeout_s=timeout_s)
    return PutAnswer(tuple(answer.get("written", ())), int(answer.get("bytes", 0)),
                     answer.get("refused"))


def procs(t: Transport, pids: Sequence[int]) -> dict[int, Raw | None]:
    """What the host's /proc says of each pid (None: gone or not visible) (op `procs`)."""
    answer = agentclient.call(t, "procs", {"pids": list(pids)})["procs"]
    return {int(p): info for p, info in answer.items()}


# ---------------------------------------------------------------- `up` in two requests per host

@dataclass(frozen=True)
class UpCheck:
    """Everything `up` must know of one host before anything starts anywhere (op `up_check`)."""

    sync: SyncDiff | None
    """What differs of the synced tree (None: no sync asked)."""
    setup: Raw | None
    """{"cached": bool, "hash", "log", "done_at"} (None: no setup asked)."""
    gpus_stdout: str | None
    """The busy-GPU program's output (None: no GPU task here)."""
    ports: tuple[PortState, ...]
    claims: Raw | None = None
    """The host's claims, as op `claims` answers (None: no GPU task here)."""
    chosen: Raw | None = None
    """The free ports for the tasks whose port is chosen at up (None: none asked), as
    `choose_ports` answers."""


def up_check(t: Transport, workdir: str, *, entries: str | None, setup: Raw | None,
             gpus_script: str | None, port_numbers: Sequence[int],
             choose: Raw | None = None) -> UpCheck:
    a = agentclient.call(t, "up_check", {"workdir": workdir, "entries": entries,
                                         "setup": None if setup is None else dict(setup),
                                         "gpus_script": gpus_script,
                                         "ports": list(port_numbers),
                                         "choose": None if choose is None else dict(choose)},
                         timeout_s=90)
    sync, gpus = a.get("sync"), a.get("gpus")
    differ = None if sync is None else sync.get("differ")
    return UpCheck(
        None if sync is None else SyncDiff(str(sync["dest"]), bool(sync.get("rsync")),
                                           sync.get("count"),
                                           None if differ is None else tuple(differ)),
        a.get("setup"), None if gpus is None else str(gpus.get("stdout") or ""),
        tuple(PortState(int(s["port"]), bool(s.get("free")), s.get("tfctl_run_id"),
                        s.get("tfctl_task"), s) for s in a.get("ports", ())),
        a.get("claims"), chosen=a.get("choose"))


@dataclass(frozen=True)
class UpGo:
    """One round of a host's start (op `up_go`): the tasks settled, and with every task of the
    host up in the last phase, its status."""

    waited: dict[str, StartState]
    status: StatusAnswer | None = None


def up_go(t: Transport, workdir: str, run_id: str, *, manifest: Raw | None = None,
          setup_log: str | None = None, launch: Sequence[str] = (), wait: Sequence[str] = (),
          timeout_s: float = 2.0, status_tail: int | None = None,
          verify_ports: Sequence[int] = (), lease_token: str | None = None) -> UpGo:
    """Prepare the run (with `manifest`), start `launch`, wait up to `timeout_s` for `wait` to
    listen or end; the host's status once they are all up (with `status_tail`). Refused
    (`port_taken`) when one of `verify_ports`, chosen by the check, was taken since; with its
    tasks up, the host drops the port leases of `lease_token`."""
    args: dict[str, Any] = {"workdir": workdir, "run_id": run_id, "launch": list(launch),
                            "wait": list(wait), "timeout_s": timeout_s, "status": status_tail,
                            "verify_ports": list(verify_ports), "lease_token": lease_token}
    if manifest is not None:
        args.update(manifest=dict(manifest), setup_log=setup_log)
    a = agentclient.call(t, "up_go", args, timeout_s=timeout_s + 45)
    st = a.get("status")
    return UpGo({n: _start_state(n, raw) for n, raw in (a.get("waited") or {}).items()},
                None if st is None else StatusAnswer(
                    st["run_id"], st["run_dir"], tuple(st.get("tasks", ())), st.get("finished"),
                    bool(st.get("live")), st.get("created_at"), st.get("inventory"),
                    st.get("hostname")))


def post_mark_up(t: Transport, workdir: str, run_id: str) -> None:
    """Tell the host's watcher that `up` verified the whole run (op `up_mark`), without
    waiting for the answer: nothing in `up` depends on it."""
    agentclient.post(t, "up_mark", {"workdir": workdir, "run_id": run_id})


# ---------------------------------------------------------------- the lab: claims, reservations

def lab(t: Transport, workdir: str, sample_s: float | None = None,
        linger_s: float | None = None) -> Raw:
    """Everything `tfctl lab` shows of one host (op `lab`, remote/agent/lab.py): GPUs, compute
    apps, their processes, the claims and the idle sampler's measure; read by
    `remote.lab.view`. `sample_s`: how often the host's idle sampler samples."""
    args: dict[str, Any] = {"workdir": workdir}
    if sample_s is not None:
        args["sample_s"] = sample_s
    if linger_s is not None:
        args["linger_s"] = linger_s
    answer: Raw = agentclient.call(t, "lab", args, timeout_s=90)
    return answer


def claims(t: Transport) -> Raw:
    """The host's claims with their state and the warnings of files skipped (op `claims`)."""
    answer: Raw = agentclient.call(t, "claims", {})
    return answer


def reserve(t: Transport, gpus: Sequence[int], until_s: float, note: str | None,
            force: bool = False) -> Raw:
    """Reserve `gpus` of the host until `until_s` (op `reserve`); RemoteError of kind
    `reserved` where another user's reservation stands (unless `force`)."""
    answer: Raw = agentclient.call(t, "reserve", {"gpus": list(gpus), "until": until_s,
                                                  "note": note, "force": force,
                                                  "host": t.host.name})
    return answer


def release(t: Transport, gpus: Sequence[int]) -> Raw:
    """Remove our reservations of `gpus` on the host (op `release`)."""
    answer: Raw = agentclient.call(t, "release", {"gpus": list(gpus)})
    return answer
