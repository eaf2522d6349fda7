"""What the dashboard knows about the run between polls, and the task rows it shows. Pure.

The app feeds it past-tense facts (a host answered, a host failed, lines arrived) with the time
they happened; widgets read rows from it. No textual import and no clock of its own, so the
rules (when a host counts as unreachable, what a task's uptime is now) are tested directly.

What a host's failed poll leaves of its tasks is what was last read, and it is shown as such:
state "unknown", the last line marked "[stale since T]", the uptime as it was then; never
"running" on the word of a host that does not answer.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace

from tfctl.inventory.plan import Plan, Task
from tfctl.remote.agent.speed import SpeedReader
from tfctl.remote.errors import HostUnreachable
from tfctl.remote.runs.current import CurrentRun
from tfctl.remote.runs.status import RunStatus, TaskStatus, job_ended, job_exit_code
from tfctl.tui.app.model import cells

# Levels name how a row or a host should look; the widgets map them to colours.
OK, IDLE, STALE, WARN, DOWN = "ok", "idle", "stale", "warn", "down"
FLAG = {"error": "✖", "warning": "⚠", "info": "ℹ"}
STATE_LEVEL = {"running": OK, "starting": STALE, "exited": IDLE, "stopped": IDLE,
               "killed": DOWN, "lost": DOWN, "unreachable": DOWN}
UNKNOWN = "unknown"  # the state of a task whose host's last poll failed


@dataclass
class HostLink:
    """What the task polls taught us about reaching one host (wall-clock seconds)."""

    polled_at_s: float | None = None
    in_flight_since_s: float | None = None
    error: str | None = None
    error_type: type[Exception] | None = None
    """The class of the last poll's error: `HostUnreachable` where the host did not answer."""
    bad_since_s: float | None = None  # when the first failed poll (of those in a row) began
    tasks: tuple[TaskStatus, ...] = ()  # as last read: stale while `error` is set

    @property
    def unreachable(self) -> bool:
        return self.error_type is not None and issubclass(self.error_type, HostUnreachable)


@dataclass(frozen=True)
class TaskRow:
    """One line of the tasks table, already formatted; `level` colours the state cell."""

    name: str
    host: str
    mask: str
    state: str
    exit: str
    up: str
    restarts: str
    rate: str
    last: str
    level: str
    cwd: str = "?"
    """The task's working directory (its record's, else the plan's)."""

    def cells(self) -> tuple[str, ...]:
        """In table column order (the exit status is part of `state`, as in `tfctl status`)."""
        return (self.name, self.host, self.mask, self.state, self.up, self.restarts,
                self.rate, self.cwd, self.last)


@dataclass
class Board:
    plan: Plan
    run_id: str | None = None
    run_hosts: tuple[str, ...] = ()
    finished_exit_code: int | None = None
    links: dict[str, HostLink] = field(default_factory=dict)
    rates: dict[str, tuple[float, str]] = field(default_factory=dict)
    """Task → its last stated speed and unit, read by the recorder's own reader (`speed`)."""
    finalize_requested: str | None = None
    _plan_index: dict[str, Task] | None = field(default=None, repr=False)
    _speed: SpeedReader | None = field(default=None, repr=False)

    @property
    def speed(self) -> SpeedReader:
        """The job's `throughput:` regexes, else the default forms: what the hosts record."""
        if self._speed is None:
            self._speed = SpeedReader(self.plan.inventory.job.throughput)
        return self._speed

    def _planned(self) -> dict[str, Task]:
        if self._plan_index is None:
            self._plan_index = {t.name: t for t in self.plan.tasks}
        return self._plan_index

    def link(self, host: str) -> HostLink:
        return self.links.setdefault(host, HostLink())

    # -- facts ------------------------------------------------------------------------------
    def set_run(self, run: CurrentRun | None) -> bool:
        """Adopt the current run; True when it is a different run than before."""
        run_id = run.run_id if run else None
        changed = run_id != self.run_id
        self.run_id = run_id
        self.run_hosts = tuple(run.hosts) if run else ()
        if changed:
            self.finished_exit_code = None
            self.finalize_requested = None
            self.rates.clear()
            for link in self.links.values():
                link.tasks = ()
                link.polled_at_s = None
        return changed

    def poll_started(self, host: str, now_s: float) -> None:
        self.link(host).in_flight_since_s = now_s

    def host_polled(self, host: str, tasks: Iterable[TaskStatus], now_s: float) -> None:
        link = self.link(host)
        link.tasks = tuple(tasks)
        link.polled_at_s = now_s
        link.in_flight_since_s = None
        link.error = link.error_type = link.bad_since_s = None

    def host_failed(self, host: str, what: str, error_type: type[Exception],
                    now_s: float) -> None:
        """A poll failed at `now_s`; the host has not answered since that poll began."""
        link = self.link(host)
        if link.error is None:
            started = link.in_flight_since_s
            link.bad_since_s = started if started is not None and started <= now_s else now_s
        link.in_flight_since_s = None
        link.error, link.error_type = what, error_type

    def status_read(self, status: RunStatus, now_s: float) -> None:
        """A whole-run read (`controller.status()`); it also says whether the run finished."""
        by_host: dict[str, list[TaskStatus]] = {}
        for task in status.tasks:
            by_host.setdefault(task.host, []).append(task)
        for host, tasks in by_host.items():
            self.host_polled(host, tasks, now_s)
        for host, why in status.unreachable.items():
            self.host_failed(host, why, HostUnreachable, now_s)
        if status.finished is not None:
            code = status.finished.get("exit_code")
            self.finished_exit_code = int(code) if isinstance(code, int) else status.exit_code

    def log_lines(self, lines: Iterable[tuple[str, str]]) -> None:
        for task, line in lines:
            self._note_rate(task, line)

    def _note_rate(self, task: str, line: str) -> None:
        found = self.speed.value(line)
        if found is not None:
            self.rates[task] = found

    # -- reads ------------------------------------------------------------------------------
    def tasks(self) -> list[TaskStatus]:
        return [t for host in self.run_hosts for t in self.link(host).tasks]

    def unreachable_hosts(self) -> list[str]:
        return [h for h in self.run_hosts if self.link(h).unreachable]

    def tasks_known(self, host: str) -> bool:
        """The host's tasks were read, and its last poll worked: a GPU process that is none
        of theirs may be called foreign (outside a run, there is nothing of ours to be)."""
        link = self.link(host)
        return self.run_id is None or (link.polled_at_s is not None and link.error is None)

    def should_finalize(self) -> bool:
        """Every host answered, the job has ended and nobody has closed the run yet."""
        if self.run_id is None or self.finished_exit_code is not None:
            return False
        if self.finalize_requested == self.run_id:
            return False
        links = [self.link(h) for h in self.run_hosts]
        if not links or any(li.polled_at_s is None or li.error for li in links):
            return False
        return job_ended(tuple(self.tasks()))

    def exit_code(self) -> int:
        return job_exit_code(tuple(self.tasks()))

    def elapsed_s(self, now_s: float) -> float | None:
        """How long the run has been going: the oldest running task's uptime, now."""
        best: float | None = None
        for host in self.run_hosts:
            link = self.link(host)
            fresh = link.polled_at_s if link.error is None else None  # stale: as it was
            for task in link.tasks:
                up = _uptime_now(task, fresh, now_s)
                if up is not None and (best is None or up > best):
                    best = up
        return best

    def pid_tasks(self, host: str) -> dict[int, str]:
        return {t.pid: t.name for t in self.link(host).tasks if t.pid is not None}

    def task_rows(self, now_s: float, host: str | None = None,
                  restart_max: Mapping[str, int] | None = None,
                  flagged: Mapping[str, str] | None = None) -> list[TaskRow]:
        """Plan order first (so a task that never started still has its row), then extras.
        `flagged` maps task names to the level of a finding about them (shown by the rate)."""
        known: dict[str, tuple[TaskStatus, HostLink]] = {}
        for h in self.run_hosts:
            link = self.link(h)
            for task in link.tasks:
                known[task.name] = (task, link)
        planned = self._planned()
        names = [*planned, *(n for n in known if n not in planned)]
        rows: list[TaskRow] = []
        for name in names:
            row = self._row(name, known.get(name), now_s, restart_max or {})
            mark = (flagged or {}).get(name)
            if mark is not None:
                row = replace(row, rate=f"{row.rate} {FLAG.get(mark, '•')}")
            if host is None or row.host == host:
                rows.append(row)
        return rows

    def _row(self, name: str, found: tuple[TaskStatus, HostLink] | None, now_s: float,
             restart_max: Mapping[str, int]) -> TaskRow:
        planned = self._planned().get(name)
        task_host = found[0].host if found else (planned.host if planned else "?")
        mask = found[0].mask if found and found[0].mask is not None else (
            planned.cuda_visible_devices if planned else None)
        cwd = (found[0].cwd if found and found[0].cwd is not None else
               planned.cwd if planned else None) or "?"
        link = self.link(task_host)
        limit = restart_max.get(name.split(":")[0])
        if found is None:
            last = ""
            if self.run_id is None:
                state = "not started"
            elif task_host not in self.run_hosts:
                state = "not in run"
            elif link.unreachable:
                state, last = UNKNOWN, f"[{_since('unreachable', link.bad_since_s)}]"
            else:
                state = "waiting" if link.polled_at_s is None else "not found"
            level = STALE if state == UNKNOWN else IDLE
            return TaskRow(name, task_host, _mask(mask), state, cells.DASH, cells.DASH,
                           _restarts(0, limit), cells.DASH, last, level, cwd)
        task, task_link = found
        exit_text = (str(task.exit_code) if task.exit_code is not None
                     else task.signal or cells.DASH)
        if task_link.error is not None:  # what was read before the host stopped answering
            stale = f"[{_since('stale', task_link.bad_since_s)}]"
            return TaskRow(name, task.host, _mask(mask), UNKNOWN, exit_text,
                           cells.duration(task.uptime_s), _restarts(task.restarts, limit),
                           cells.DASH, f"{stale} {task.last_line}".rstrip(), STALE, cwd)
        state = task.describe()
        level = DOWN if task.failed else STATE_LEVEL.get(task.state, WARN)
        up = _uptime_now(task, task_link.polled_at_s, now_s)
        rate = None
        if task.state == "running":
            rate = self.speed.value(task.last_line) or self.rates.get(name)
        return TaskRow(name, task.host, _mask(mask), state, exit_text, cells.duration(up),
                       _restarts(task.restarts, limit), cells.rate(*rate) if rate else cells.DASH,
                       task.last_line, level, cwd)


def _since(word: str, wall_s: float | None) -> str:
    return f"{word} since {cells.clock_hms(wall_s)}" if wall_s is not None else word


def _mask(mask: str | None) -> str:
    if mask is None:
        return "?"
    return mask if mask else cells.DASH


def _restarts(count: int, limit: int | None) -> str:
    return f"{count}/{limit}" if limit else str(count)


def _uptime_now(task: TaskStatus, polled_at_s: float | None, now_s: float) -> float | None:
    if task.uptime_s is None:
        return None
    if task.state in ("running", "starting") and polled_at_s is not None:
        return task.uptime_s + max(0.0, now_s - polled_at_s)
    return task.uptime_s
