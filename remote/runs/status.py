"""A run's live state, read from the hosts, and the rule for when the job has ended.

The job ends when the chief has exited or, with no chief, every worker has. Parameter servers
(and ParameterServerStrategy's workers) never exit on their own (`server.join()`), so whoever
observes the end (`wait`, `status`, the UI) stops them and marks the run finished with the
chief's / workers' exit status.

A failed parameter server or chief (killed, lost, or exited non-zero, with no restart left) ends
the job too: workers block on a missing ps forever (classic flags) or fail with it
(ParameterServerStrategy), and nothing drives them without the chief. `fatal_failure` names that
task; whoever observes it stops the remaining ps, workers and chief (the evaluator and TensorBoard
stay up for reading the results) and the job's status is the failed task's. To resume instead,
ask for `restart: {chief: on-failure}` (the chief restarts and reads its checkpoint) — while a
restart is pending the task is `starting`, not failed. The ranks of a process group (torch,
jax: `Framework.one_group`) are each such a task, and rank 0 is the chief: the group cannot go on
without any of them (inventory/frameworks/ranks.py).

A task lost to its host's restart (`lost (host restarted at T)`: the host rebooted under it, its
records kept) is neither: it waits for `tfctl restart` (or `down`), and the job's end waits with
it, unless a host's watcher has already recorded the job's end (the chief's port closed while
its host was down), when it counts as lost like any other.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tfctl.inventory.frameworks import framework_of
from tfctl.inventory.model import Job
from tfctl.remote.agent.vocab import TaskRecord
from tfctl.remote.agent.wirerecord import replace
from tfctl.remote.connect.fleet import Fleet
from tfctl.remote.connect.session import agentops
from tfctl.remote.reach import clock_hms, reach_json, unreachable_words
from tfctl.remote.runs.failure import explain
from tfctl.remote.runs.notices import last_said
from tfctl.remote.silence import Silence, silences_from

ENDED = ("exited", "killed", "stopped", "lost")
FATAL_TYPES = ("ps", "chief")


class TaskStatus(TaskRecord):
    """A task of the run as its host's agent answered it (the vocabulary's `TaskRecord`, every
    field of it, and a record as it is: frozen, read by `from_wire`) with the host that
    answered and what the client reads of it: whether it ended, failed, waits for a restart,
    and the line of its log that says most."""

    last_line: str = ""
    """The log's last line (the last that is not a framework's start-up notice, where the
    lines read have one); for a task that failed, the line that names its error."""

    @property
    def awaits_restart(self) -> bool:
        """Lost to its host's restart: not running, not stopped by tfctl, not failed."""
        return self.state == "lost" and self.host_restarted_at_s is not None

    @property
    def ended(self) -> bool:
        return self.state in ENDED and not self.awaits_restart

    @property
    def failed(self) -> bool:
        return not self.awaits_restart and (
            self.state in ("killed", "lost") or (self.state == "exited" and
                                                 self.exit_code not in (0, None)))

    def describe(self) -> str:
        if self.state == "exited":
            return f"exited {self.exit_code}"
        if self.state == "killed":
            return f"killed by {self.signal}"
        if self.awaits_restart and self.host_restarted_at_s is not None:
            return f"lost (host restarted at {clock_hms(self.host_restarted_at_s)})"
        return self.state


@dataclass(frozen=True)
class RunStatus:
    run_id: str
    tasks: tuple[TaskStatus, ...]
    unreachable: Mapping[str, str]
    finished: Mapping[str, Any] | None = None
    acting_chief: str | None = None
    """A task that is the chief without the name: worker:0 in the flags style, rank 0 of a
    group."""
    asked_at_s: float | None = None
    """Wall-clock time this read began: an unreachable host has not answered since then."""
    silences: tuple[Silence, ...] = ()
    """Hosts whose watcher cannot reach the chief's port now (silence, not a refusal)."""
    records_stopped: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    """host → since when and why the run's records stopped there (a full disk)."""
    idle: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    """host → the run's GPUs there idle under the lab policy, its owner warned (since, stop_at;
    agent/idlewatch.py): the run stops there at `stop_at` unless it is used again."""
    taken_back: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    """host → the tasks this read found running with no keeper there (theirs was killed) and had
    a new keeper take back: tasks, keeper_pid, gone_pid (agent/keeper.py)."""
    group: bool = False
    """The workers are one process group's ranks (torch, jax: `Framework.one_group`): the
    failure of any ends the job, as a chief's would."""

    def unreachable_since(self, host: str) -> float | None:
        if host not in self.unreachable:
            return None
        return self.asked_at_s if self.asked_at_s is not None else time.time()

    def reach_words(self, host: str, now_s: float) -> str | None:
        """"unreachable since 21:16:24 (no answer for 2 s)", or None for a host that answered."""
        since = self.unreachable_since(host)
        return None if since is None else unreachable_words(since, now_s)

    def reach(self, hosts: Sequence[str], now_s: float) -> dict[str, dict[str, Any]]:
        """host → {"reachable", "unreachable_since" (ISO 8601), "no_answer_s"[, "why"]}."""
        return {h: reach_json(self.unreachable_since(h), now_s, self.unreachable.get(h))
                for h in dict.fromkeys([*hosts, *self.unreachable])}

    @property
    def job_ended(self) -> bool:
        return job_ended(self._judged, self.acting_chief, self.group)

    @property
    def exit_code(self) -> int:
        return job_exit_code(self._judged, self.acting_chief, self.group)

    @property
    def fatal(self) -> TaskStatus | None:
        return fatal_failure(self._judged, self.acting_chief, self.group)

    @property
    def lost_to_restarts(self) -> dict[str, float]:
        """host → when it restarted, for every host with tasks lost to that restart."""
        return {t.host: t.host_restarted_at_s for t in self.tasks
                if t.awaits_restart and t.host_restarted_at_s is not None}

    @property
    def _judged(self) -> tuple[TaskStatus, ...]:
        """The tasks as the job's end rule sees them: once the end is recorded, a task lost to
        its host's restart is lost like any other (it will not be started again)."""
        if self.finished is None:
            return self.tasks
        return tuple(replace(t, host_restarted_at_s=None) if t.awaits_restart else t
                     for t in self.tasks)


def read_status(fleet: Fleet, run_id: str, hosts: list[str], tail: int = 1) -> RunStatus:
    """Every task of the run, from every host."""
    asked_at = time.time()
    answers = fleet.map(lambda t: agentops.status(t, t.host.workdir, run_id, tail=tail), hosts)
    return status_from(fleet.inventory.job, run_id, answers.succeeded,
                       {h: str(e) for h, e in answers.failed.items()}, asked_at)


def status_from(job: Job, run_id: str, answers: Mapping[str, agentops.StatusAnswer],
                unreachable: Mapping[str, str], asked_at: float) -> RunStatus:
    """The run's status from its hosts' answers (a status read's, or `up`'s last round's)."""
    tasks: list[TaskStatus] = []
    finished: Mapping[str, Any] | None = None
    silences: list[Silence] = []
    records: dict[str, Mapping[str, Any]] = {}
    idle: dict[str, Mapping[str, Any]] = {}
    taken_back: dict[str, Mapping[str, Any]] = {}
    for host, answer in answers.items():
        if answer.idle:
            idle[host] = answer.idle
        if answer.taken_back:
            taken_back[host] = answer.taken_back
        finished = finished or answer.finished
        tasks += [task_from_agent(host, raw) for raw in answer.tasks]
        silences += silences_from(host, answer.silences)
        if answer.records:
            records[host] = answer.records
    order = {"ps": 0, "worker": 1, "chief": 2, "evaluator": 3, "tensorboard": 4}
    tasks.sort(key=lambda t: (order.get(t.type, 9), t.index))
    return RunStatus(run_id, tuple(tasks), dict(unreachable), finished,
                     acting_chief_of(job), asked_at, silences=tuple(silences),
                     records_stopped=records, idle=idle, taken_back=taken_back,
                     group=framework_of(job).one_group)


def taken_back_words(host: str, taken: Mapping[str, Any]) -> str:
    """`on h2 the run's keeper (pid 812) was gone: ps:1, worker:1 run on, taken back by a new
    keeper (pid 977)`: what a status read found and did (agent/keeper.py)."""
    gone = f" (pid {taken['gone_pid']})" if taken.get("gone_pid") else ""
    new = f" (pid {taken['keeper_pid']})" if taken.get("keeper_pid") else ""
    return (f"on {host} the run's keeper{gone} was gone: {', '.join(taken.get('tasks') or [])} "
            f"run on, taken back by a new keeper{new}")


def records_words(host: str, state: Mapping[str, Any]) -> str:
    """`records stopped on h2 since 21:16:24: disk full (12 KiB free) ...`: a host's watcher
    keeps no records while its disk has no room (agent/disk.py); the tasks are not touched."""
    since = state.get("since")
    when = f" since {clock_hms(float(since))}" if isinstance(since, int | float) else ""
    free = state.get("free_bytes")
    room = f" ({int(free) // 1024} KiB free)" if isinstance(free, int) else ""
    return (f"records stopped on {host}{when}: {state.get('why') or 'disk full'}{room}; its "
            "tasks keep running, and the records resume once there is room")


def acting_chief_of(job: Job) -> str | None:
    """In the flags style worker 0 is the chief in practice: it initialises and saves, so its
    end is the job's end, and so is rank 0's in a process group (`Framework.one_group`)
    (remote/runs/endrule.py says the same to the hosts)."""
    return "worker:0" if job.style == "flags" or framework_of(job).one_group else None


def _is_chief(task: TaskStatus, acting_chief: str | None) -> bool:
    return task.type == "chief" or task.name == acting_chief


def task_from_agent(host: str, record: TaskRecord | Mapping[str, Any]) -> TaskStatus:
    """The task as `host` answered it: its record whole (or the record's wire data)."""
    task = TaskStatus.from_wire(record)
    lines = task.last_lines
    last = last_said(lines)  # TensorFlow's start-up notices are not what a task says
    if task.failed:  # the line that names the error, not the last stack frame
        last = explain(lines).headline or last
    return replace(task, host=host, last_line=last)


def fatal_failure(tasks: tuple[TaskStatus, ...], acting_chief: str | None = None,
                  group: bool = False) -> TaskStatus | None:
    """The first ps or chief (any rank, in a group) that failed for good: the job cannot
    continue without it."""
    return next((t for t in tasks if (t.type in FATAL_TYPES or t.name == acting_chief or
                                      (group and t.type == "worker")) and t.failed), None)


def describe_fatal(task: TaskStatus) -> str:
    """`ps:0 on h1 failed (killed by SIGKILL): the job cannot continue without its parameter
    servers`."""
    without = {"ps": "its parameter servers", "chief": "its chief"}.get(
        task.type, "every rank of its group" if task.type == "worker" else "it")
    said = (f"{task.name} on {task.host} failed ({task.describe()}): the job cannot continue "
            f"without {without}")
    return said + describe_error(task.last_lines)


def describe_error(lines: Sequence[str]) -> str:
    """`\n  <the error line>\n  hint: <what to do>` for a failed task's log tail, or ""."""
    failure = explain(lines)
    text = f"\n  {failure.headline}" if failure.headline else ""
    return text + (f"\n  hint: {failure.hint}" if failure.hint else "")


def job_ended(tasks: tuple[TaskStatus, ...], acting_chief: str | None = None,
              group: bool = False) -> bool:
    if fatal_failure(tasks, acting_chief, group) is not None:
        return True
    chiefs = [t for t in tasks if _is_chief(t, acting_chief)]
    if chiefs:
        return all(t.ended for t in chiefs)
    workers = [t for t in tasks if t.type == "worker"]
    return bool(workers) and all(t.ended for t in workers)


def job_exit_code(tasks: tuple[TaskStatus, ...], acting_chief: str | None = None,
                  group: bool = False) -> int:
    """The job's status: a failed ps's or chief's (or rank's), else the chief's, or the worst
    worker's (a signal counts as 128+n)."""
    fatal = fatal_failure(tasks, acting_chief, group)
    deciders = [fatal] if fatal is not None else (
        [t for t in tasks if t.type == "chief"] or [t for t in tasks if t.type == "worker"])
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
    if not status.job_ended or status.unreachable:
        return []
    from tfctl.remote.runs.stop import stop_run, stopped_tasks

    # ps tasks (and ParameterServerStrategy's workers) only serve: `server.join()` never
    # returns; after a fatal failure the chief goes too. TensorBoard and the evaluator are left
    # for the user to read the results.
    serving = ("ps", "worker", "chief") if status.fatal is not None else ("ps", "worker")
    ps = [t.name for t in status.tasks if t.type in serving and not t.ended]
    stopped: list[str] = []
    if ps:  # only the hosts that run them
        holding = [h for h in hosts if any(t.host == h and t.name in ps for t in status.tasks)]
        result = stop_run(fleet, status.run_id, holding, grace_s=5.0, tasks=ps)
        stopped = stopped_tasks(result)
    code = status.exit_code
    if status.finished is not None and not stopped:
        return stopped  # a host's watcher (remote/agent/watch.py) recorded the end first
    fleet.map(lambda t: agentops.finish(t, t.host.workdir, status.run_id, {
        "state": "finished", "exit_code": code,
        "cause": status.fatal.name if status.fatal is not None else None}), hosts)
    return stopped
