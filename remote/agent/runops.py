"""The agent's operations on a run of the host: prepare, launch, wait_ports, status, stop,
finish, runs, logs.

Part of the agent program (`__init__.py`): stdlib only, Python >= 3.8, Linux, no tfctl imports.
Its operations are in the table of `optable.py`; each takes its request as the vocabulary's
record (vocab.py) and answers with one. The host's run directory (rundir.py) is the source of
truth about what runs there.
"""

from __future__ import annotations

import os
from typing import Any

from tfctl.remote.agent.boot import boot_id
from tfctl.remote.agent.claims import claim_run, release_run
from tfctl.remote.agent.disk import records_state
from tfctl.remote.agent.energy import energy_of_run
from tfctl.remote.agent.hostops import hostname
from tfctl.remote.agent.idlewatch import IDLE_FILE
from tfctl.remote.agent.jsonfile import now, read_json, write_json
from tfctl.remote.agent.keeper import keep_tasks, take_back_orphans
from tfctl.remote.agent.policy import session_kind
from tfctl.remote.agent.rundir import (
    expand,
    load_manifest,
    manifest_tasks,
    run_dir_of,
    runs_root,
    task_file,
)
from tfctl.remote.agent.state import live_runs, stop_tasks, task_statuses, watcher_silences
from tfctl.remote.agent.tasklog import log_tail, read_log_from
from tfctl.remote.agent.vocab import (
    FinishAnswer,
    FinishRequest,
    LaunchAnswer,
    LaunchRequest,
    LogChunk,
    LogsAnswer,
    LogsRequest,
    PrepareAnswer,
    PrepareRequest,
    RunRecord,
    RunsAnswer,
    RunsRequest,
    StartState,
    StatusAnswer,
    StatusRequest,
    StopAnswer,
    StopRequest,
    WaitPortsAnswer,
    WaitPortsRequest,
)
from tfctl.remote.agent.wait import wait_until_up
from tfctl.remote.agent.wire import AgentError


def op_prepare(req: PrepareRequest) -> PrepareAnswer:
    workdir, run_id = expand(str(req.workdir)), str(req.run_id)
    for other, live in live_runs(workdir).items():
        if live and not _beside(req.manifest, run_dir_of(workdir, other)):
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


def _beside(manifest: dict[str, Any] | None, other_dir: str) -> bool:
    """Whether a new run may start while the live run of `other_dir` runs in the same workdir:
    when either is a one-off command's (`tfctl run`, a manifest with `oneoff`), which opens no
    port and holds only the GPUs placed for it; two runs of the inventory's job may not."""
    if (manifest or {}).get("oneoff") is not None:
        return True
    return (read_json(os.path.join(other_dir, "manifest.json")) or {}).get("oneoff") is not None


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
    kept = keep_tasks(run_dir, workdir, run_id, manifest, req.tasks)
    return LaunchAnswer.from_wire(dict(kept, claim_warning=claim_run(
        run_dir, run_id, manifest, kept["keeper_pid"])))


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
    taken_back = take_back_orphans(run_dir, run_id, workdir, manifest)
    if taken_back is not None:
        seen = None  # their records now name the new keeper
    tasks = task_statuses(run_dir, run_id, manifest, req.tail, seen)
    if any(t.state == "lost" for t in tasks):  # as in op_wait_ports: a just-ended task
        tasks = task_statuses(run_dir, run_id, manifest, req.tail)
    return StatusAnswer(run_id, run_dir, tuple(tasks), read_json(os.path.join(run_dir,
                                                                                "finished.json")),
                        any(t.state in ("running", "starting") for t in tasks),
                        manifest.get("created_at"), manifest.get("inventory"), hostname(),
                        tuple(watcher_silences(run_dir)), records_state(run_dir),
                        read_json(os.path.join(run_dir, IDLE_FILE)), taken_back)


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


def op_finish(req: FinishRequest) -> FinishAnswer:
    run_dir = run_dir_of(expand(str(req.workdir)), str(req.run_id))
    load_manifest(run_dir)
    record = FinishAnswer(req.status, now())
    write_json(os.path.join(run_dir, "finished.json"), record.to_wire())
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
                              read_json(os.path.join(run_dir, "finished.json")),
                              tuple(energy_of_run(run_dir, live[run_id])) if req.energy else None,
                              manifest.get("oneoff"), manifest.get("framework"),
                              session_kind(manifest)))
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


def newest_run(workdir: str) -> str:
    runs = op_runs(RunsRequest(workdir)).runs
    if not runs:
        raise AgentError("no_run", f"no tfctl run on this host under {runs_root(workdir)}")
    return runs[0].run_id
