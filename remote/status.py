"""A run's live state, read from the hosts, and the rule for when the job has ended.

The job ends when the chief has exited or, with no chief, every worker has. Parameter servers
(and ParameterServerStrategy's workers) never exit on their own (`server.join()`), so whoever
observes the end (`wait`, `status`, the UI) stops them and marks the run finished with the
chief's / workers' exit status.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tfctl.remote import agentclient
from tfctl.remote.fleet import Fleet

ENDED = ("exited", "killed", "stopped", "lost")


@dataclass(frozen=True)
class TaskStatus:
    name: str
    host: str
    state: str
    """running | starting | exited | killed | stopped | lost | unreachable"""
    pid: int | None = None
    exit_code: int | None = None
    signal: str | None = None
    uptime_s: float | None = None
    restarts: int = 0
    last_line: str = ""
    mask: str | None = None

    @property
    def type(self) -> str:
        return self.name.split(":")[0]

    @property
    def index(self) -> int:
        return int(self.name.split(":")[1])

    @property
    def ended(self) -> bool:
        return self.state in ENDED

    @property
    def failed(self) -> bool:
        return self.state in ("killed", "lost") or (self.state == "exited" and
                                                    self.exit_code not in (0, None))

    def describe(self) -> str:
        if self.state == "exited":
            return f"exited {self.exit_code}"
        if self.state == "killed":
            return f"killed by {self.signal}"
        return self.state


@dataclass(frozen=True)
class RunStatus:
    run_id: str
    tasks: tuple[TaskStatus, ...]
    unreachable: Mapping[str, str]
    finished: Mapping[str, Any] | None = None

    @property
    def job_ended(self) -> bool:
        return job_ended(self.tasks)

    @property
    def exit_code(self) -> int:
        return job_exit_code(self.tasks)


def read_status(fleet: Fleet, run_id: str, hosts: list[str], tail: int = 1) -> RunStatus:
    answers = fleet.map(lambda t: agentclient.call(
        t, "status", {"workdir": t.host.workdir, "run_id": run_id, "tail": tail}), hosts)
    tasks: list[TaskStatus] = []
    finished: Mapping[str, Any] | None = None
    for host, answer in answers.succeeded.items():
        finished = finished or answer.get("finished")
        tasks += [task_from_agent(host, raw) for raw in answer.get("tasks", [])]
    unreachable = {h: str(e) for h, e in answers.failed.items()}
    order = {"ps": 0, "worker": 1, "chief": 2, "evaluator": 3, "tensorboard": 4}
    tasks.sort(key=lambda t: (order.get(t.type, 9), t.index))
    return RunStatus(run_id, tuple(tasks), unreachable, finished)


def task_from_agent(host: str, raw: Mapping[str, Any]) -> TaskStatus:
    lines = raw.get("last_lines") or []
    return TaskStatus(
        name=raw["name"], host=host, state=raw.get("state", "lost"), pid=raw.get("pid"),
        exit_code=raw.get("exit_code"), signal=raw.get("signal"), uptime_s=raw.get("uptime_s"),
        restarts=int(raw.get("restarts") or 0), last_line=lines[-1] if lines else "",
        mask=raw.get("cuda_visible_devices"),
    )


def job_ended(tasks: tuple[TaskStatus, ...]) -> bool:
    chiefs = [t for t in tasks if t.type == "chief"]
    if chiefs:
        return all(t.ended for t in chiefs)
    workers = [t for t in tasks if t.type == "worker"]
    return bool(workers) and all(t.ended for t in workers)


def job_exit_code(tasks: tuple[TaskStatus, ...]) -> int:
    """The job's status: the chief's, or the worst worker's (a signal counts as 128+n)."""
    deciders = [t for t in tasks if t.type == "chief"] or [t for t in tasks if t.type == "worker"]
    worst = 0
    for t in deciders:
        if t.state == "exited":
            code = t.exit_code or 0
        elif t.state in ("killed", "lost", "stopped"):
            code = 137 if t.state != "stopped" else 143
        else:
            continue
        worst = max(worst, code)
    return worst


def finalize_if_ended(fleet: Fleet, status: RunStatus, hosts: list[str]) -> list[str]:
    """When the job has ended, stop its parameter servers and mark the run finished.

    Returns the tasks it stopped (empty if the job is still running or already finalized).
    """
    if not status.job_ended or status.finished is not None or status.unreachable:
        return []
    from tfctl.remote.stop import stop_run

    # ps tasks (and ParameterServerStrategy's workers) only serve: `server.join()` never
    # returns. TensorBoard and the evaluator are left for the user to read the results.
    ps = [t.name for t in status.tasks if t.type in ("ps", "worker") and not t.ended]
    stopped: list[str] = []
    if ps:
        result = stop_run(fleet, status.run_id, hosts, grace_s=5.0, tasks=ps)
        stopped = sorted(n for r in result.succeeded.values() for n in r.get("stopped", []))
    code = status.exit_code
    fleet.map(lambda t: agentclient.call(t, "finish", {
        "workdir": t.host.workdir, "run_id": status.run_id,
        "status": {"state": "finished", "exit_code": code}}), hosts)
    return stopped
