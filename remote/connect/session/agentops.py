"""One typed client function per agent operation: arguments in, the vocabulary's record out.

This is how tfctl calls a host's agent. `agentclient.call(transport, op, args)` speaks the wire
(op names, JSON) and is the session package's own: the rest of tfctl calls these instead. Each
builds its request and reads its answer with the agent's vocabulary (remote/agent/vocab.py), the
records the agent's `op_*` functions (remote/agent/hostops.py, runops.py, up.py, lost.py,
lab.py, tickets.py) read and answer with: an op's arguments and the shape of its answer are
written once, there.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from tfctl.remote.agent.vocab import (
    ClaimsAnswer,
    ClaimsRequest,
    ConnectAnswer,
    ConnectRequest,
    ConnectResult,
    FinishAnswer,
    FinishRequest,
    GpuState,
    GpuStateRequest,
    LabPolicy,
    LabPolicyRequest,
    LabRequest,
    LaunchAnswer,
    LaunchRequest,
    ListenAnswer,
    ListenRequest,
    LogChunk,
    LogsAnswer,
    LogsRequest,
    PortsAnswer,
    PortsRequest,
    PortState,
    ProbeAnswer,
    ProbeRequest,
    ProcsAnswer,
    ProcsRequest,
    PutAnswer,
    PutFilesRequest,
    ReleaseAnswer,
    ReleaseRequest,
    ReserveAnswer,
    ReserveRequest,
    RestartLostAnswer,
    RunRecord,
    RunRef,
    RunsAnswer,
    RunsRequest,
    StartState,
    StatusAnswer,
    StatusRequest,
    StopAnswer,
    StopRequest,
    SyncDiff,
    SyncDiffRequest,
    TaskPid,
    TaskRecord,
    TicketDropAnswer,
    TicketPutAnswer,
    TicketRequest,
    UpCheck,
    UpCheckRequest,
    UpGo,
    UpGoRequest,
    UsageAnswer,
    UsageRequest,
    WaitPortsAnswer,
    WaitPortsRequest,
)
from tfctl.remote.agent.wirerecord import Wire
from tfctl.remote.connect.session import agentclient
from tfctl.remote.connect.transport import Transport

Raw = Mapping[str, Any]

__all__ = ["ClaimsAnswer", "ConnectResult", "FinishAnswer", "GpuState", "LaunchAnswer",
           "ListenAnswer", "LogChunk", "PortState", "ProbeAnswer", "PutAnswer", "ReleaseAnswer",
           "ReserveAnswer", "RestartLostAnswer", "RunRecord", "StartState", "StatusAnswer",
           "StopAnswer", "SyncDiff", "TaskPid", "TaskRecord", "TicketDropAnswer",
           "TicketPutAnswer", "UpCheck", "UpGo", "UsageAnswer"]


def _call(t: Transport, op: str, request: Wire, timeout_s: float | None = 60.0) -> Any:
    return agentclient.call(t, op, request.to_wire(), timeout_s=timeout_s)


# ---------------------------------------------------------------- preflight

def probe(t: Transport, workdir: str, ask_tf: bool = False,
          ask: tuple[str, ...] = (), ask_hostname: bool = False) -> ProbeAnswer:
    """What the host has (python, TensorFlow, nvidia-smi, disk, the workdir) (op `probe`).
    `ask_tf`: also what TensorFlow says of itself (version, package, the GPUs it sees); `ask`:
    what these other frameworks say (torch, jax); each asked once per interpreter and version
    and cached on the host; `ask_hostname`: what the host's name resolves to there."""
    return ProbeAnswer.from_wire(_call(t, "probe", ProbeRequest(workdir, ask_tf, ask=ask,
                                                                ask_hostname=ask_hostname),
                                       timeout_s=240.0 if ask_tf or ask else 60.0))


# ---------------------------------------------------------------- ports / port probe

def ports(t: Transport, numbers: Sequence[int]) -> list[PortState]:
    """Whether each port is free on the host and, if not, who holds it (op `ports`)."""
    return list(PortsAnswer.from_wire(_call(t, "ports", PortsRequest(tuple(numbers)))).ports)


def choose_ports(t: Transport, ask: Raw) -> Raw:
    """Free ports for the tasks whose port is chosen at up (op `ports` with `choose`, agent
    freeports.py): {"chosen": {task: port}, "short": [tasks no free port was left for]}."""
    answer = PortsAnswer.from_wire(_call(t, "ports", PortsRequest(choose=dict(ask))))
    return answer.choose or {}


def release_ports(t: Transport, token: str) -> None:
    """Drop the port leases of an `up` (`token`) that will not start (op `ports`, `release`)."""
    _call(t, "ports", PortsRequest(release=token))


def listen(t: Transport, numbers: Sequence[int], seconds: float) -> ListenAnswer:
    """Bind these ports for `seconds` in a background listener (op `listen`): bound, busy, pid."""
    return ListenAnswer.from_wire(_call(t, "listen", ListenRequest(tuple(numbers), seconds)))


def connect(t: Transport, targets: Sequence[str], timeout_s: float) -> list[ConnectResult]:
    """Try TCP connects from the host to each `address:port` (op `connect`)."""
    answer = _call(t, "connect", ConnectRequest(tuple(targets), timeout_s))
    return list(ConnectAnswer.from_wire(answer).targets)


# ---------------------------------------------------------------- a run's life

def launch(t: Transport, workdir: str, run_id: str, tasks: Sequence[str] | None = None
           ) -> LaunchAnswer:
    """Start these tasks of the prepared run (all when None) and its watcher (op `launch`)."""
    request = LaunchRequest(workdir, run_id, None if tasks is None else list(tasks))
    return LaunchAnswer.from_wire(_call(t, "launch", request))


def restart_lost(t: Transport, workdir: str, run_id: str, tasks: Sequence[str] | None = None
                 ) -> RestartLostAnswer:
    """Start again these lost tasks of the run (every lost one of the host when None) with
    their records, and the run's watcher if it is gone (op `restart_lost`, agent/lost.py); the
    host refuses (RemoteError) a task that is not lost, or a run that has ended."""
    request = RunRef(workdir, run_id, None if tasks is None else list(tasks))
    return RestartLostAnswer.from_wire(_call(t, "restart_lost", request))


def wait_ports(t: Transport, workdir: str, run_id: str, tasks: Sequence[str], timeout_s: float,
               call_timeout_s: float | None = None) -> dict[str, StartState]:
    """Wait up to `timeout_s` for these tasks to listen on their ports or end (op `wait_ports`)."""
    answer = _call(t, "wait_ports", WaitPortsRequest(workdir, run_id, list(tasks), timeout_s),
                   timeout_s=call_timeout_s if call_timeout_s is not None else timeout_s + 30)
    return WaitPortsAnswer.from_wire(answer).tasks


def status(t: Transport, workdir: str, run_id: str | None, tail: int = 1) -> StatusAnswer:
    """Every task of the run on this host with `tail` last log lines (op `status`)."""
    return StatusAnswer.from_wire(_call(t, "status", StatusRequest(workdir, run_id, tail)))


def stop(t: Transport, workdir: str, run_id: str, tasks: Sequence[str] | None = None,
         grace_s: float = 10.0) -> StopAnswer:
    """TERM, grace, KILL, verify: the run's tasks on this host, or only those of `tasks` that
    run here (op `stop`; names of other hosts' tasks are passed over)."""
    request = StopRequest(workdir, run_id, None if tasks is None else list(tasks), True, grace_s)
    return StopAnswer.from_wire(_call(t, "stop", request, timeout_s=grace_s + 60))


def finish(t: Transport, workdir: str, run_id: str, record: Raw) -> FinishAnswer:
    """Record how the run ended on this host (op `finish`): `{"state": ..., ...}`."""
    return FinishAnswer.from_wire(_call(t, "finish", FinishRequest(workdir, run_id, dict(record))))


def runs(t: Transport, workdir: str, energy: bool = False) -> list[RunRecord]:
    """The runs this host's workdir holds, newest first (op `runs`); with `energy`, what each
    GPU cost each run (read from the runs' gpu.csv: only when asked)."""
    return list(RunsAnswer.from_wire(_call(t, "runs", RunsRequest(workdir, energy))).runs)


# ---------------------------------------------------------------- logs, files, processes

def logs(t: Transport, workdir: str, run_id: str, offsets: Mapping[str, int],
         max_bytes: int, tail_lines: int | None = None) -> dict[str, LogChunk]:
    """Each task's log from its offset (or its last `tail_lines` lines) (op `logs`)."""
    request = LogsRequest(workdir, run_id, dict(offsets), max_bytes=max_bytes,
                          tail_lines=tail_lines)
    return LogsAnswer.from_wire(_call(t, "logs", request)).logs


def sync_diff(t: Transport, workdir: str, packed_entries: str, timeout_s: float = 60
              ) -> SyncDiff:
    """Which of the listed paths differ in the host's workdir, which it creates (op
    `sync_diff`)."""
    answer = _call(t, "sync_diff", SyncDiffRequest(workdir, packed_entries), timeout_s=timeout_s)
    return SyncDiff.from_wire(answer)


def put_files(t: Transport, dest: str, files: Any, timeout_s: float = 120) -> PutAnswer:
    """Write these packed files under `dest` on the host (op `put_files`)."""
    answer = _call(t, "put_files", PutFilesRequest(dest, files), timeout_s=timeout_s)
    return PutAnswer.from_wire(answer)


def procs(t: Transport, pids: Sequence[int]) -> dict[int, Raw | None]:
    """What the host's /proc says of each pid (None: gone or not visible) (op `procs`)."""
    answer = ProcsAnswer.from_wire(_call(t, "procs", ProcsRequest(tuple(pids))))
    return {int(p): info for p, info in answer.procs.items()}


# ---------------------------------------------------------------- `up` in two requests per host

def up_check(t: Transport, workdir: str, *, entries: str | None, setup: Raw | None,
             gpus_script: str | None, port_numbers: Sequence[int],
             choose: Raw | None = None, ask_hostname: bool = False) -> UpCheck:
    """Everything `up` must know of the host before anything starts anywhere (op `up_check`);
    `ask_hostname`: also the host's name and what it resolves to there."""
    request = UpCheckRequest(workdir, entries, None if setup is None else dict(setup),
                             gpus_script, tuple(port_numbers),
                             None if choose is None else dict(choose), ask_hostname)
    return UpCheck.from_wire(_call(t, "up_check", request, timeout_s=90))


def up_go(t: Transport, workdir: str, run_id: str, *, manifest: Raw | None = None,
          setup_log: str | None = None, launch: Sequence[str] = (), wait: Sequence[str] = (),
          timeout_s: float = 2.0, status_tail: int | None = None,
          verify_ports: Sequence[int] = (), lease_token: str | None = None) -> UpGo:
    """Prepare the run (with `manifest`), start `launch`, wait up to `timeout_s` for `wait` to
    listen or end; the host's status once they are all up (with `status_tail`). Refused
    (`port_taken`) when one of `verify_ports`, chosen by the check, was taken since; with its
    tasks up, the host drops the port leases of `lease_token`."""
    request = UpGoRequest(workdir, run_id, None if manifest is None else dict(manifest),
                          setup_log if manifest is not None else None, tuple(launch),
                          tuple(wait), timeout_s, status_tail, tuple(verify_ports), lease_token)
    return UpGo.from_wire(_call(t, "up_go", request, timeout_s=timeout_s + 45))


def post_mark_up(t: Transport, workdir: str, run_id: str) -> None:
    """Tell the host's watcher that `up` verified the whole run (op `up_mark`), without
    waiting for the answer: nothing in `up` depends on it."""
    agentclient.post(t, "up_mark", RunRef(workdir, run_id).to_wire())


# ---------------------------------------------------------------- the lab and its queue

def lab(t: Transport, workdir: str, sample_s: float | None = None,
        linger_s: float | None = None) -> GpuState:
    """Everything `tfctl lab` shows of one host (op `lab`, remote/agent/lab.py): GPUs, compute
    apps, their processes, the claims and the idle sampler's measure; read by
    `remote.lab.view`. `sample_s`: how often the host's idle sampler samples."""
    return GpuState.from_wire(_call(t, "lab", LabRequest(workdir, sample_s, linger_s),
                                    timeout_s=90))


def lab_policy(t: Transport) -> LabPolicy:
    """The lab policy in force on the host, or why its file is ignored (op `lab_policy`,
    remote/agent/policy.py)."""
    return LabPolicy.from_wire(_call(t, "lab_policy", LabPolicyRequest()))


def usage(t: Transport, since_s: float) -> UsageAnswer:
    """What the host's GPUs were used for since `since_s`, every user's (op `usage`,
    remote/agent/ledger.py): a row per user, run or process, GPU and hour."""
    return UsageAnswer.from_wire(_call(t, "usage", UsageRequest(since_s), timeout_s=90))


def claims(t: Transport) -> ClaimsAnswer:
    """The host's claims with their state and the warnings of files skipped (op `claims`)."""
    return ClaimsAnswer.from_wire(_call(t, "claims", ClaimsRequest()))


def reserve(t: Transport, gpus: Sequence[int], until_s: float, note: str | None,
            force: bool = False, held_elsewhere: int = 0) -> ReserveAnswer:
    """Reserve `gpus` of the host until `until_s` (op `reserve`); RemoteError of kind
    `reserved` where another user's reservation stands (unless `force`), of kind
    `policy_limit` where the lab policy's limits refuse it (`held_elsewhere`: our GPUs on the
    other hosts, which the limit counts too)."""
    request = ReserveRequest(tuple(gpus), until_s, note, force, t.host.name, held_elsewhere)
    return ReserveAnswer.from_wire(_call(t, "reserve", request))


def release(t: Transport, gpus: Sequence[int]) -> ReleaseAnswer:
    """Remove our reservations of `gpus` on the host (op `release`)."""
    return ReleaseAnswer.from_wire(_call(t, "release", ReleaseRequest(tuple(gpus))))


def gpu_state(t: Transport, beat: str | None = None, tickets: bool = False) -> GpuState:
    """One host's GPUs, processes and claims (op `gpu_state`, remote/agent/tickets.py), as
    placement and a waiting job read them; with `tickets`, its queue, our ticket `beat`
    refreshed first."""
    request = GpuStateRequest(tickets, beat or None)
    return GpuState.from_wire(_call(t, "gpu_state", request))


def ticket_put(t: Transport, ticket_id: str, job: str, gpus: Sequence[int] | None,
               count: int | None, client: str | None) -> TicketPutAnswer:
    """Leave (or refresh, keeping its place) our queue ticket on the host for `gpus` or `count`
    free GPUs (op `ticket_put`)."""
    request = TicketRequest(ticket_id, job, None if gpus is None else tuple(gpus), count, client)
    return TicketPutAnswer.from_wire(_call(t, "ticket_put", request))


def ticket_drop(t: Transport, ticket_id: str) -> TicketDropAnswer:
    """Remove our queue ticket from the host, where it is (op `ticket_drop`)."""
    return TicketDropAnswer.from_wire(_call(t, "ticket_drop", TicketRequest(ticket_id)))
