"""Starting again the tasks of a run that are lost on this host (`tfctl restart`).

Part of the agent program (`__init__.py`): stdlib only, Python >= 3.8, Linux, no tfctl imports.
Its operations are in the table of `optable.py`.

A task is lost when neither it nor its keeper runs and it never recorded its end: most often
because the host restarted under it (its records are of an earlier boot, `boot.py`), or because
something killed it with its keeper. `restart_lost` starts such tasks again in the same run, from
the manifest's records (the same argv, environment, GPU mask and port: the plan they were
started with), their logs appended to, under the run's keeper (started again when it is
gone, keeper.py), so that the job still ends on this host by its rule. A task that runs, ended,
or was stopped by tfctl is refused, as is every task of a run that has ended: the host is the
judge of what is lost, not the client's last look.
"""

from __future__ import annotations

import os
from typing import Any

from tfctl.remote.agent.boot import booted_at
from tfctl.remote.agent.claims import claim_run
from tfctl.remote.agent.jsonfile import now, read_json
from tfctl.remote.agent.keeper import keep_tasks, take_back_orphans
from tfctl.remote.agent.rundir import expand, load_manifest, manifest_tasks, run_dir_of, task_file
from tfctl.remote.agent.state import observe
from tfctl.remote.agent.vocab import RestartLostAnswer, RunRef
from tfctl.remote.agent.wire import AgentError


def lost_tasks(run_dir: str, run_id: str, manifest: dict[str, Any],
               names: list[str] | None) -> dict[str, dict[str, Any]]:
    """The tasks named (every lost one of this host when None) as `observe` sees them; refuses
    (AgentError) any of them that is not lost, or all of them when the run has ended."""
    finished = read_json(os.path.join(run_dir, "finished.json"))
    if finished is not None:
        why = (finished.get("status") or {}).get("cause") or (
            finished.get("status") or {}).get("state") or "recorded"
        raise AgentError("run_ended", f"run {run_id} has ended ({why}): its tasks are not "
                         "started again; `tfctl up` starts a new run")
    seen = observe(run_dir, run_id, manifest_tasks(manifest, names))
    if names is None:
        lost = {n: o for n, o in seen.items() if o["state"] == "lost"}
        if not lost:
            states = ", ".join(f"{n} {o['state']}" for n, o in seen.items())
            raise AgentError("nothing_lost", f"no task of run {run_id} is lost on this host "
                             f"({states or 'it has none'})")
        return lost
    for name, obs in seen.items():
        if obs["state"] != "lost":
            state = obs["state"].replace("_", " ")
            raise AgentError("not_lost", f"{name} of run {run_id} is {state} on this host, not "
                             "lost: only a lost task is started again", task=name,
                             state=obs["state"])
    return seen


def op_restart_lost(req: RunRef) -> RestartLostAnswer:
    workdir, run_id = expand(str(req.workdir)), str(req.run_id)
    run_dir = run_dir_of(workdir, run_id)
    manifest = load_manifest(run_dir)
    taken = take_back_orphans(run_dir, run_id, workdir, manifest)  # a killed keeper's tasks
    try:
        lost = lost_tasks(run_dir, run_id, manifest, req.tasks)
    except AgentError as exc:
        if taken is None or not (exc.kind == "nothing_lost" or exc.extra.get("task") in
                                 taken["tasks"]):
            raise
        return RestartLostAnswer(keeper_pid=taken["keeper_pid"],
                                 taken_back=tuple(taken["tasks"]))
    for name, obs in lost.items():
        why = (f"its host restarted at {_clock(obs['host_restarted_at'])}"
               if obs.get("host_restarted_at") else "it and its keeper are gone")
        with open(task_file(run_dir, name, ".log"), "a") as log:
            log.write(f"==> tfctl: starting {name} again at {_clock(now())}: it was lost "
                      f"({why})\n")
    kept = keep_tasks(run_dir, workdir, run_id, manifest, sorted(lost))
    return RestartLostAnswer.from_wire(dict(
        kept, claim_warning=claim_run(run_dir, run_id, manifest, kept["keeper_pid"]),
        host_restarted_at=booted_at() if any(o.get("host_restarted_at") for o in lost.values())
        else None, taken_back=tuple(taken["tasks"]) if taken else ()))


def _clock(wall_s: float) -> str:
    import time

    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(wall_s))
