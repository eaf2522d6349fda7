"""The host-side agent's operations on a run and a host: probe, ports, prepare, launch, wait,
status, stop, finish, runs, logs, listen, connect, sync, procs.

The program is the agent files (`session.program.AGENT_FILES`, joined by `agent_source`). tfctl
keeps it on the host as `<workdir>/.tfctl/agent/agent_<hash>.py` (installed by
`agentclient.BOOT` when missing) and runs it as a session (`optable.serve`): one JSON request per
line in, one answer per line out, for as long as the command runs, so an operation costs a line
each way rather than an interpreter start. Each operation here takes its request as the
vocabulary's record (vocab.py) and answers with one; `optable.py` names every operation and its
request. The host's run directory (`<workdir>/.tfctl/runs/<run_id>/`) is the source of truth
about what runs there.

Rules for the agent's modules: stdlib only, Python >= 3.8, Linux (/proc), no tfctl imports (the
`from tfctl...` lines are only for running the same code in-process and are removed from the
program sent to hosts).
"""
from __future__ import annotations

import os
import sys
import time
from typing import Any

from tfctl.remote.agent.boot import boot_id
from tfctl.remote.agent.claims import claim_run, release_run
from tfctl.remote.agent.disk import records_state, room_at
from tfctl.remote.agent.freeports import choose_ports, release
from tfctl.remote.agent.proc import describe_process, is_alive, port_report, user_name
from tfctl.remote.agent.run import (
    AgentError,
    fork_detached,
    launch_tasks,
    load_manifest,
    log_tail,
    manifest_tasks,
    now,
    read_json,
    read_log_from,
    run_dir_of,
    runs_root,
    task_file,
    write_json,
)
from tfctl.remote.agent.state import live_runs, stop_tasks, task_statuses, watcher_silences
from tfctl.remote.agent.sync import put_files, sync_diff
from tfctl.remote.agent.tfprobe import tf_probe
from tfctl.remote.agent.vocab import (
    ConnectRequest,
    FinishRequest,
    LaunchAnswer,
    LaunchRequest,
    ListenRequest,
    LogChunk,
    LogsAnswer,
    LogsRequest,
    PortsAnswer,
    PortsRequest,
    PortState,
    PrepareAnswer,
    PrepareRequest,
    ProbeRequest,
    ProcsRequest,
    PutAnswer,
    PutFilesRequest,
    RunRecord,
    RunsAnswer,
    RunsRequest,
    StartState,
    StatusAnswer,
    StatusRequest,
    StopAnswer,
    StopRequest,
    SyncDiff,
    SyncDiffRequest,
    WaitPortsAnswer,
    WaitPortsRequest,
)
from tfctl.remote.agent.wait import wait_until_up
from tfctl.remote.agent.watch import start_watcher


def hostname() -> str:
    """The host's name, as `socket.gethostname()` gives it, without importing socket."""
    return os.uname().nodename


TF_DISTRIBUTIONS = ("tensorflow", "tensorflow-cpu", "tf-nightly", "tensorflow-gpu")


# ---------------------------------------------------------------- the operations (host)

def op_probe(req: ProbeRequest) -> dict[str, Any]:
    import shutil
    from importlib import metadata

    if sys.flags.no_site:  # started with -S (see agentclient): find installed packages now
        import site

        site.main()

    installed = {}
    for dist in TF_DISTRIBUTIONS:
        try:
            installed[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    tf_version = next(iter(installed.values()), None)
    workdir = req.workdir
    tensorflow = tf_probe(installed, req.fresh) if req.ask_tf else None
    return {
        "tensorflow": tensorflow, "tf_distributions": installed,
        "python": sys.version.split()[0], "executable": sys.executable, "tf_version": tf_version,
        "nvidia_smi": shutil.which("nvidia-smi"), "home": os.path.expanduser("~"),
        "workdir": None if workdir is None else expand(workdir),
        "workdir_free_bytes": None if workdir is None else room_at(expand(workdir)),
        "hostname": hostname(), "rsync": shutil.which("rsync"),
        "user": user_name(os.getuid()), "uid": os.getuid(),
        "configured_python_missing": os.environ.get("TFCTL_CONFIGURED_PYTHON_MISSING") == "1",
    }


def op_ports(req: PortsRequest) -> PortsAnswer:
    answer = PortsAnswer(port_states(req.ports), choose_from(req.choose) if req.choose else None)
    if req.release:  # an `up` that will not start frees the ports it leased
        release(req.release)
    return answer


def port_states(ports: Any) -> tuple[PortState, ...]:
    """Each port free, or who holds it (`proc.port_report`)."""
    return tuple(PortState.from_wire(entry) for entry in port_report(int(p) for p in ports))


def choose_from(ask: dict[str, Any]) -> dict[str, Any]:
    """Free ports for the tasks whose port is chosen at up (freeports.py): `ask` has `tasks`
    ([{"task", "preferred"}]), `range` ([low, high]), `fixed` (the run's written ports here)
    and the `up`'s lease `token` (none from `check`, which only asks)."""
    low, high = (int(x) for x in ask["range"])
    return choose_ports(list(ask.get("tasks", [])), low, high, ask.get("fixed", ()),
                        ask.get("token"))


def op_prepare(req: PrepareRequest) -> PrepareAnswer:
    workdir, run_id = expand(str(req.workdir)), str(req.run_id)
    for other, live in live_runs(workdir).items():
        if live:
            raise AgentError("run_live", f"run {other} is still running on this host; stop it "
                             "with `tfctl down` first", run_id=other)
    run_dir = run_dir_of(workdir, run_id)
    if os.path.exists(os.path.join(run_dir, "manifest.json")):
        raise AgentError("run_exists", f"run {run_id} already exists in {run_dir}")
    manifest = dict(req.manifest or {}, run_id=run_id)
    make_output_dirs(workdir, manifest.get("outputs") or [])
    os.makedirs(run_dir, exist_ok=True)
    manifest.setdefault("created_at", now())
    manifest.setdefault("boot_id", boot_id())  # the host's boot the run started in (boot.py)
    write_json(os.path.join(run_dir, "manifest.json"), manifest)
    return PrepareAnswer(run_id, run_dir)


def make_output_dirs(workdir: str, folders: list[str]) -> None:
    """The job's output folders, made before any task starts (a ps writing a checkpoint shard,
    an evaluator waiting for one, find their folder); never outside the workdir."""
    root = os.path.realpath(workdir)
    for folder in folders:
        path = os.path.realpath(os.path.join(root, folder))
        if os.path.commonpath([root, path]) != root:
            raise AgentError("bad_request", f"output folder {folder!r} is outside {workdir}")
        os.makedirs(path, exist_ok=True)


def op_launch(req: LaunchRequest) -> LaunchAnswer:
    workdir, run_id = expand(str(req.workdir)), str(req.run_id)
    run_dir = run_dir_of(workdir, run_id)
    manifest = load_manifest(run_dir)
    started = launch_tasks(run_dir, workdir, run_id, manifest, req.tasks)
    watcher = start_watcher(run_dir, run_id)
    return LaunchAnswer.from_wire(dict(started, watcher_pid=watcher, claim_warning=claim_run(
        run_dir, run_id, manifest, watcher)))


def op_wait_ports(req: WaitPortsRequest) -> WaitPortsAnswer:
    run_id = str(req.run_id)
    run_dir = run_dir_of(expand(str(req.workdir)), run_id)
    manifest = load_manifest(run_dir)
    waited = wait_until_up(run_dir, run_id, manifest, manifest_tasks(manifest, req.tasks),
                           req.timeout_s)
    return WaitPortsAnswer(start_states(waited["tasks"]), bool(waited["ready"]))


def start_states(waited: dict[str, dict[str, Any]]) -> dict[str, StartState]:
    """The wait's result per task (`state.wait_for_ports`) as the vocabulary's records."""
    return {name: StartState.from_wire(dict(result, name=name)) for name, result in waited.items()}


def op_status(req: StatusRequest, seen: dict[str, Any] | None = None) -> StatusAnswer:
    workdir = expand(str(req.workdir))
    run_id = req.run_id or newest_run(workdir)
    run_dir = run_dir_of(workdir, run_id)
    manifest = load_manifest(run_dir)
    tasks = task_statuses(run_dir, run_id, manifest, req.tail, seen)
    if any(t.state == "lost" for t in tasks):  # as in op_wait_ports: a just-ended task
        tasks = task_statuses(run_dir, run_id, manifest, req.tail)
    return StatusAnswer(run_id, run_dir, tuple(tasks), read_json(os.path.join(run_dir,
                                                                                "finished.json")),
                        any(t.state in ("running", "starting") for t in tasks),
                        manifest.get("created_at"), manifest.get("inventory"), hostname(),
                        tuple(watcher_silences(run_dir)), records_state(run_dir))


def op_stop(req: StopRequest) -> StopAnswer:
    workdir, run_id = expand(str(req.workdir)), str(req.run_id)
    run_dir, names = run_dir_of(workdir, run_id), req.tasks
    if names is not None and req.known_only:  # those of the tasks named that run here
        known = {t.get("name") for t in (read_json(os.path.join(run_dir, "manifest.json"))
                                         or {}).get("tasks", [])}
        names = [n for n in names if n in known]
        if not names:
            return StopAnswer()
    answer = StopAnswer.from_wire(stop_tasks(run_dir, run_id, names, req.grace_s))
    if names is None:  # the whole run stopped here: its claim goes (claims.py)
        release_run(run_id)
    return answer


def op_finish(req: FinishRequest) -> dict[str, Any]:
    run_dir = run_dir_of(expand(str(req.workdir)), str(req.run_id))
    load_manifest(run_dir)
    record = {"status": req.status, "finished_at": now()}
    write_json(os.path.join(run_dir, "finished.json"), record)
    release_run(str(req.run_id))
    return record


def op_runs(req: RunsRequest) -> RunsAnswer:
    workdir = expand(str(req.workdir))
    live = live_runs(workdir)
    runs = []
    for run_id in live:
        run_dir = run_dir_of(workdir, run_id)
        manifest = read_json(os.path.join(run_dir, "manifest.json")) or {}
        runs.append(RunRecord(run_id, live[run_id], manifest.get("created_at"),
                              tuple(t.get("name") for t in manifest.get("tasks", [])), run_dir,
                              manifest.get("inventory"), tuple(manifest.get("outputs") or ()),
                              read_json(os.path.join(run_dir, "finished.json"))))
    runs.sort(key=lambda r: (r.created_at or 0, r.run_id), reverse=True)
    return RunsAnswer(tuple(runs))


def op_logs(req: LogsRequest) -> LogsAnswer:
    run_dir = run_dir_of(expand(str(req.workdir)), str(req.run_id))
    manifest = load_manifest(run_dir)
    offsets = req.offsets or {}
    names = req.tasks or list(offsets) or [t["name"] for t in manifest["tasks"]]
    tail = req.tail_lines
    logs = {}
    for name in names:
        path = task_file(run_dir, name, ".log")
        offset = offsets.get(name)
        if (offset is None or offset < 0) and tail is not None:
            size = os.path.getsize(path) if os.path.exists(path) else 0
            logs[name] = LogChunk("".join(line + "\n" for line in log_tail(path, int(tail))),
                                  size, False, size)
        else:
            logs[name] = LogChunk.from_wire(read_log_from(path, max(int(offset or 0), 0),
                                                          req.max_bytes))
    return LogsAnswer(logs)


def op_listen(req: ListenRequest) -> dict[str, Any]:
    """Hold listening sockets for a while in a detached process, so peers can test reaching us."""
    import socket

    seconds = req.seconds
    bound: list[socket.socket] = []
    busy: dict[str, str] = {}
    for port in (int(p) for p in req.ports):
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(("", port))
            sock.listen(64)
        except OSError as exc:
            sock.close()
            busy[str(port)] = exc.strerror or str(exc)
            continue
        bound.append(sock)
    holder = None
    if bound:
        holder = fork_detached(lambda: _serve_until(bound, time.time() + seconds),
                               keep=tuple(sock.fileno() for sock in bound))
    ports = [sock.getsockname()[1] for sock in bound]
    for sock in bound:
        sock.close()
    return {"bound": ports, "busy": busy, "pid": holder}


def _serve_until(socks: list[Any], deadline: float) -> int:
    # Connections are never accepted: the kernel completes the handshake from the backlog, the
    # peer closes first, and the TIME-WAIT stays on its side, so our task ports are free at once.
    while time.time() < deadline:
        time.sleep(max(0.0, min(0.5, deadline - time.time())))
    return 0


def op_connect(req: ConnectRequest) -> dict[str, Any]:
    """TCP connects from this host to each `address:port` of `targets`, each answered with
    `why` it failed: `unresolved` (this host cannot turn the name into an address, so no
    firewall is to blame), `refused`, `timeout` or `error`; None when it connected."""
    import socket

    timeout_s = req.timeout_s
    results = []
    for target in req.targets:
        addr, _, port = str(target).rpartition(":")
        started = time.time()
        error, why = None, None
        address = (addr.strip("[]"), 0)
        try:
            address = (address[0], int(port))
            socket.getaddrinfo(address[0], address[1], 0, socket.SOCK_STREAM)
        except (OSError, ValueError, UnicodeError) as exc:  # socket.gaierror is an OSError
            error, why = str(exc) or type(exc).__name__, "unresolved"
        if why is None:
            try:
                socket.create_connection(address, timeout=timeout_s).close()
            # Python 3.8's socket.timeout is not yet TimeoutError; both are OSErrors.
            except (socket.timeout, TimeoutError) as exc:  # noqa: UP041
                error, why = str(exc) or "timed out", "timeout"
            except ConnectionRefusedError as exc:
                error, why = str(exc) or "connection refused", "refused"
            except OSError as exc:
                error, why = str(exc) or type(exc).__name__, "error"
        results.append({"target": target, "ok": error is None, "error": error, "why": why,
                        "elapsed_ms": round((time.time() - started) * 1000, 1)})
    return {"targets": results}


def op_sync_diff(req: SyncDiffRequest) -> SyncDiff:
    return SyncDiff.from_wire(sync_diff(expand(str(req.workdir)), str(req.entries)))


def op_put_files(req: PutFilesRequest) -> PutAnswer:
    return PutAnswer.from_wire(put_files(expand(str(req.workdir)), req.files))


def op_procs(req: ProcsRequest) -> dict[str, Any]:
    """Who each pid is (user, command, tfctl run and task): nvidia-smi names only the pid.

    A pid gone since it was listed answers None (pids are reused: never guess).
    """
    return {"procs": {str(p): describe_process(p) if is_alive(p) else None
                      for p in (int(p) for p in req.pids)}}


# ---------------------------------------------------------------- helpers (host)

def expand(path: str) -> str:
    return os.path.abspath(os.path.expanduser(str(path)))


def need(req: dict[str, Any], key: str) -> Any:
    """`req[key]`, or a `bad_request` refusal where a request without a vocabulary record
    (`lab`, `reserve`, the queue's) lacks it."""
    if req.get(key) is None:
        raise AgentError("bad_request", f"the {req.get('op')} request needs '{key}'")
    return req[key]


def newest_run(workdir: str) -> str:
    runs = op_runs(RunsRequest(workdir)).runs
    if not runs:
        raise AgentError("no_run", f"no tfctl run on this host under {runs_root(workdir)}")
    return runs[0].run_id

