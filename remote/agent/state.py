"""What a run's tasks are doing now, waiting for their ports, and stopping exactly them.

Part of the agent program (`__init__.py`): stdlib only, Python >= 3.8, Linux, no tfctl imports.

A task's processes are those tagged with its `TFCTL_RUN_ID`/`TFCTL_TASK` (children that left the
group with `setsid` included) plus the members of its recorded process group (the task leads its
own, keeper.py), the group counting only while the task's own process is provably the recorded
one (same start time) or a tagged process is in it: a pgid, like a pid, can be reused by a
stranger. A task's supervisor, in its pid record, is the run's keeper on the host.
"""

from __future__ import annotations

import os
import signal
import time
from typing import Any

from tfctl.remote.agent.boot import booted_at, from_other_boot
from tfctl.remote.agent.jsonfile import now, read_json, write_json
from tfctl.remote.agent.proc import (
    group_members,
    listening_sockets,
    port_report,
    same_process,
    send_signal,
    signal_group,
    socket_owners,
    tagged_processes,
)
from tfctl.remote.agent.rundir import manifest_tasks, runs_root, task_file
from tfctl.remote.agent.tasklog import log_tail
from tfctl.remote.agent.vocab import TaskRecord
from tfctl.remote.agent.wire import which

ENDED = ("exited", "killed", "stopped", "lost")
KEEPER_PID = "keeper.pid.json"  # the run's keeper (keeper.py) records its pid here
SILENCE_FILE = "silence.json"  # and its watch, here, the tasks whose ports it cannot hear from
KEEPER_EXIT_S = 3.0
KEEPER_RECORDS_END_S = 2.0


def _records(run_dir: str, name: str) -> dict[str, Any]:
    return {"pid": read_json(task_file(run_dir, name, ".pid.json")),
            "exit": read_json(task_file(run_dir, name, ".exit.json")),
            "stopped": os.path.exists(task_file(run_dir, name, ".stopped"))}


def supervisor_alive(pid_rec: dict[str, Any] | None) -> bool:
    """The keeper that a task's pid record names still runs (same boot, same start time)."""
    if not pid_rec or from_other_boot(pid_rec):
        return False
    return same_process(pid_rec.get("supervisor_pid"), pid_rec.get("supervisor_start_ticks"))


def recorded_alive(record: dict[str, Any] | None) -> bool:
    """The process a `{pid, start_ticks, boot_id}` record names still runs (same boot, same
    start time): a pid and its start ticks alone may name another process after a reboot."""
    return bool(record) and not from_other_boot(record) and same_process(
        (record or {}).get("pid"), (record or {}).get("start_ticks"))


def _task_processes(run_id: str, recs: dict[str, dict[str, Any]]) -> dict[int, str]:
    """pid → task name of every live process of these tasks (the keeper excluded)."""
    found = {pid: str(task) for pid, (_, task) in tagged_processes(run_id).items()
             if task in recs}
    groups = {r["pid"]["pgid"]: name for name, r in recs.items()
              if r["pid"] and not from_other_boot(r["pid"])}
    supervisors = {r["pid"]["supervisor_pid"] for r in recs.values() if r["pid"]}
    members = group_members(groups)
    for pid, pgid in members.items():
        name = groups[pgid]
        trusted = recorded_alive(recs[name]["pid"]) or any(
            members.get(tagged) == pgid for tagged in found)
        if trusted and pid not in supervisors:
            found.setdefault(pid, name)
    return found


def observe(run_dir: str, run_id: str, tasks: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per task: its records, live pids, the pid listening on its port, and its state.

    A task whose pid record is from an earlier boot and that never recorded its end is `lost`
    to the host's restart: `host_restarted_at` says when this boot began (else None)."""
    recs = {t["name"]: _records(run_dir, t["name"]) for t in tasks}
    procs = _task_processes(run_id, recs)
    ports = {t["name"]: t.get("port") for t in tasks}
    sockets = listening_sockets({p for p in ports.values() if p}) if any(ports.values()) else {}
    seen: dict[str, dict[str, Any]] = {}
    for name, rec in recs.items():
        pid_rec = rec["pid"] or {}
        own = sorted(pid for pid, task in procs.items() if task == name)
        inodes = [i for i, (port, _) in sockets.items() if port == ports[name]]
        owners = socket_owners(inodes, own) if inodes and own else {}
        listening_pid = next(iter(owners.values()), None)
        task_alive = pid_rec.get("pid") in own and recorded_alive(pid_rec)
        restarted_at = None
        if rec["exit"]:
            state = "stopped" if rec["stopped"] else (
                "killed" if rec["exit"].get("signal") else "exited")
        elif not rec["pid"]:
            state = "not_started"
        elif task_alive:
            state = "running" if not ports[name] or listening_pid else "starting"
        elif supervisor_alive(rec["pid"]):
            state = "starting"  # between a restart's backoff, or about to record the end
        else:
            # The keeper may have written the exit record since we read it.
            late_exit = read_json(task_file(run_dir, name, ".exit.json"))
            if late_exit:
                rec = dict(rec, exit=late_exit)
                state = "stopped" if rec["stopped"] else (
                    "killed" if late_exit.get("signal") else "exited")
            else:
                state = "stopped" if rec["stopped"] else "lost"
                if state == "lost" and from_other_boot(pid_rec):
                    restarted_at = booted_at()
        seen[name] = dict(rec, pids=own, listening_pid=listening_pid, state=state,
                          host_restarted_at=restarted_at)
    return seen


# A task that failed comes with more of its log: the client picks the error line out of it
# (remote/runs/failure.py), which TensorFlow often prints above a screen of stack frames.
FAILED_TAIL = 40


def _failed(exit_rec: dict[str, Any]) -> bool:
    return bool(exit_rec) and (bool(exit_rec.get("signal")) or exit_rec.get("exit_code") not in
                               (0, None))


def task_statuses(run_dir: str, run_id: str, manifest: dict[str, Any], tail: int,
                  seen: dict[str, dict[str, Any]] | None = None) -> list[TaskRecord]:
    """Every task's record: the manifest's task (what the plan made of it, by the record's
    field names) with what is seen of it now; `seen`: an `observe` of all of them just made
    (`up_go` reuses its wait's last look rather than scanning /proc once more)."""
    tasks = manifest_tasks(manifest, None)
    if seen is None or set(seen) != {t["name"] for t in tasks}:
        seen = observe(run_dir, run_id, tasks)
    out = []
    for task in tasks:
        obs = seen[task["name"]]
        pid_rec, exit_rec = obs["pid"] or {}, obs["exit"] or {}
        if obs.get("host_restarted_at") is not None:  # its pids name nothing of this boot
            pid_rec = {k: v for k, v in pid_rec.items()
                       if k not in ("pid", "pgid", "supervisor_pid")}
        started, ended = pid_rec.get("started_at"), exit_rec.get("ended_at")
        if started and obs["state"] in ("running", "starting"):
            uptime = round(time.time() - started, 3)
        else:
            uptime = round(ended - started, 3) if started and ended else None
        log = task_file(run_dir, task["name"], ".log")
        out.append(TaskRecord.from_wire(dict(
            task, state=obs["state"], pid=pid_rec.get("pid"),
            pgid=pid_rec.get("pgid"), supervisor_pid=pid_rec.get("supervisor_pid"),
            pids=obs["pids"], listening_pid=obs["listening_pid"],
            exit_code=exit_rec.get("exit_code"), signal=exit_rec.get("signal"),
            error=exit_rec.get("error"), started_at=started, ended_at=ended,
            uptime_s=uptime, restarts=exit_rec.get("restarts", pid_rec.get("restarts", 0)),
            last_exit=pid_rec.get("last_exit"),
            host_restarted_at=obs.get("host_restarted_at"),
            last_lines=log_tail(log, max(tail, FAILED_TAIL) if _failed(exit_rec) else tail),
            log_size_bytes=os.path.getsize(log) if os.path.exists(log) else 0)))
    return out


# A task that opens no port (single-process MirroredStrategy, a plain script) counts as started
# once it has run this long without exiting: long enough for a bad argument, a missing module or
# a crash at import to show as a failed start, short next to TensorFlow's own start.
PORTLESS_SETTLE_S = 5.0


def settled(pid_rec: dict[str, Any] | None, now_s: float | None = None) -> bool:
    """The task's current process has run at least PORTLESS_SETTLE_S."""
    started = (pid_rec or {}).get("started_at")
    return started is not None and (now_s or time.time()) - float(started) >= PORTLESS_SETTLE_S


def wait_for_ports(run_dir: str, run_id: str, manifest: dict[str, Any],
                   names: list[str] | None, timeout_s: float) -> dict[str, Any]:
    """Wait until each task listens on its port (or runs, if it has none), ends, or time is up."""
    tasks = manifest_tasks(manifest, names)
    deadline = time.time() + timeout_s
    results: dict[str, dict[str, Any]] = {}
    while True:
        pending = [t for t in tasks if t["name"] not in results]
        seen = observe(run_dir, run_id, pending)
        for name, obs in seen.items():
            port = next(t.get("port") for t in pending if t["name"] == name)
            exit_rec = obs["exit"] or {}
            if obs["state"] == "running":
                if not port and not settled(obs["pid"]):
                    continue  # no port to wait for: up once it has run a while without dying
                results[name] = {"state": "listening" if port else "running", "port": port,
                                 "pid": obs["listening_pid"] or (obs["pid"] or {}).get("pid")}
            elif obs["state"] in ENDED:
                results[name] = {"state": obs["state"], "port": port,
                                 "exit_code": exit_rec.get("exit_code"),
                                 "signal": exit_rec.get("signal"), "error": exit_rec.get("error"),
                                 "last_lines": log_tail(task_file(run_dir, name, ".log"), 20)}
        if len(results) == len(tasks) or time.time() >= deadline:
            break
        time.sleep(0.1)
    for task in tasks:
        if task["name"] not in results:
            port = task.get("port")
            results[task["name"]] = {
                "state": "timeout", "port": port,
                "port_holder": port_report([port])[0] if port else None,
                "last_lines": log_tail(task_file(run_dir, task["name"], ".log"), 20)}
    ready = all(r["state"] in ("listening", "running") for r in results.values())
    return {"tasks": results, "ready": ready, "seen": seen}


def live_runs(workdir: str) -> dict[str, bool]:
    """run id → live, for every run directory: a tagged process or its keeper still runs."""
    root = runs_root(workdir)
    try:
        run_ids = sorted(d for d in os.listdir(root) if os.path.isdir(os.path.join(root, d)))
    except OSError:
        return {}
    tagged_runs = {run for run, _ in tagged_processes().values()}
    live = {}
    for run_id in run_ids:
        run_dir = os.path.join(root, run_id)
        names = set(os.listdir(run_dir))
        # A task with its exit record is done with (its keeper writes the record last),
        # so an old run costs a folder listing, not a read of each task's pid record.
        live[run_id] = run_id in tagged_runs or any(
            supervisor_alive(read_json(os.path.join(run_dir, f)))
            for f in names if f.endswith(".pid.json")
            and f[:-len(".pid.json")] + ".exit.json" not in names)
    return live


def stop_tasks(run_dir: str, run_id: str, names: list[str] | None,
               grace_s: float) -> dict[str, Any]:
    """TERM the tasks' groups and tagged processes, KILL what outlives `grace_s`, then verify."""
    stop_all = names is None  # then also whatever carries the run's tag, run dir or not
    manifest = read_json(os.path.join(run_dir, "manifest.json"))
    if manifest is not None:
        names = [t["name"] for t in manifest_tasks(manifest, names)]
    recs = {name: _records(run_dir, name) for name in names or []}
    for name, rec in recs.items():
        if not rec["exit"] and os.path.isdir(run_dir):  # its keeper must not restart it
            mark_stopped(task_file(run_dir, name, ".stopped"))

    def current() -> dict[int, str]:
        found = _task_processes(run_id, recs)
        if stop_all:
            found.update({p: str(t) for p, (_, t) in tagged_processes(run_id).items()})
        return found

    first = current()
    stopped = sorted(set(first.values()) | {n for n, r in recs.items()
                                             if not r["exit"] and supervisor_alive(r["pid"])})
    for rec in recs.values():
        if not rec["exit"] and recorded_alive(rec["pid"]):  # the task leads its group
            signal_group(rec["pid"]["pgid"], signal.SIGTERM)
    signalled: set[int] = set()
    seen = set(first)
    remaining, deadline = first, time.time() + grace_s
    while remaining:
        for pid in set(remaining) - signalled:
            send_signal(pid, signal.SIGTERM)
            signalled.add(pid)
        if time.time() >= deadline:
            break
        time.sleep(0.05)
        remaining = current()
        seen |= set(remaining)
    killed = sorted(set(remaining.values()))
    deadline = time.time() + 3.0
    while remaining and time.time() < deadline:
        for pid in remaining:
            send_signal(pid, signal.SIGKILL)
        time.sleep(0.05)
        remaining = current()
        seen |= set(remaining)
    await_ends(run_dir, recs)
    if stop_all:
        end_keeper(run_dir)
    left = tagged_processes(run_id)
    remaining_pids = sorted(p for p, (_, t) in left.items() if stop_all or t in recs)
    gpu_pids, gpu_error = gpu_pids_among(seen | set(remaining_pids))
    return {"stopped": stopped, "killed_after_grace": killed, "remaining_pids": remaining_pids,
            "gpu_pids": gpu_pids, "gpu_error": gpu_error}


def mark_stopped(path: str) -> None:
    """The `.stopped` marker: its name says it (an inode, no room needed); the time in it is
    left out on a full disk rather than fail the stop."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, f"{now()}\n".encode())
    except OSError:
        pass
    finally:
        os.close(fd)


def await_ends(run_dir: str, recs: dict[str, dict[str, Any]]) -> None:
    """Give the keeper a moment to record the stopped tasks' ends; record those it has not
    (a keeper that lingers, or is gone) as ended by the stop."""
    pending = [n for n, r in recs.items() if r["pid"] and not r["exit"]]
    deadline = time.time() + KEEPER_RECORDS_END_S
    while pending and time.time() < deadline and any(supervisor_alive(recs[n]["pid"])
                                                      for n in pending):
        time.sleep(0.02)
        pending = [n for n in pending if not os.path.exists(task_file(run_dir, n, ".exit.json"))]
    for name in pending:
        if not os.path.exists(task_file(run_dir, name, ".exit.json")):
            keeper = "its keeper did not record its end" if supervisor_alive(
                recs[name]["pid"]) else "no keeper kept it"
            write_json(task_file(run_dir, name, ".exit.json"), {
                "exit_code": None, "signal": None, "ended_at": now(),
                "error": f"stopped by tfctl stop; {keeper}"})


def watcher_silences(run_dir: str) -> list[dict[str, Any]]:
    """The tasks the run's watch cannot hear from now, with since when (`watch.py`); none once
    the keeper is gone, whose last record may be stale."""
    if not recorded_alive(read_json(os.path.join(run_dir, KEEPER_PID))):
        return []
    return list((read_json(os.path.join(run_dir, SILENCE_FILE)) or {}).get("silences") or [])


def end_keeper(run_dir: str) -> None:
    """Make the run's keeper write its last records and exit (it does once none of its tasks
    runs, keeper.py); kill it if it lingers.

    A whole-run stop (`tfctl down`, a rollback) leaves nothing of tfctl on the host: the keeper
    and its nvidia-smi stream go with the tasks, before the client is told the run is stopped.
    """
    record = read_json(os.path.join(run_dir, KEEPER_PID)) or {}
    pid, ticks = record.get("pid"), record.get("start_ticks")
    if pid is None or not recorded_alive(record):
        return
    send_signal(pid, signal.SIGTERM)
    deadline = time.time() + KEEPER_EXIT_S
    while same_process(pid, ticks) and time.time() < deadline:
        time.sleep(0.02)
    if same_process(pid, ticks):
        signal_group(pid, signal.SIGKILL)  # it leads its own session (each task leads its own)


def gpu_pids_among(pids: set[int]) -> tuple[list[int], str | None]:
    """Those of `pids` that nvidia-smi still lists as holding GPU memory (and any error)."""
    import subprocess
    exe = which("nvidia-smi")
    if exe is None:
        return [], None
    try:
        res = subprocess.run([exe, "--query-compute-apps=pid", "--format=csv,noheader"],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             text=True, timeout=15)
    except (OSError, subprocess.SubprocessError) as exc:
        return [], f"nvidia-smi failed: {exc}"
    if res.returncode != 0:
        return [], (res.stdout.strip().splitlines() or [f"exit {res.returncode}"])[0]
    listed = {int(line) for line in (raw.strip() for raw in res.stdout.splitlines())
              if line.isdigit()}
    return sorted(listed & pids), None
