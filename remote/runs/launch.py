"""`tfctl up`'s launch: ports checked, run dirs prepared, tasks started in order, or rolled back.

Order (with `--ps-first`) follows docs/field-notes.md §1: parameter servers first, and only
once their ports listen the workers, chief, evaluator and TensorBoard. A port already held by an
old server would let a new chief "succeed" against it, so every task port is checked free before
anything starts. If any task cannot start, everything this run started is stopped again and the
cause is reported with the task's last log lines; nothing half-started is left behind.

Ctrl-C (KeyboardInterrupt) is handled the same way: the start phases run in a helper thread and
wait for ports in short rounds (`WAIT_ROUND_S`), so an interrupt is acted on within one round,
after any in-flight `launch` has returned (stopping before it returned could miss tasks it was
still starting); then the rollback runs and `Interrupted` says what it stopped.
"""

from __future__ import annotations

import secrets
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from tfctl.inventory.plan import Plan
from tfctl.remote.connect import agentops
from tfctl.remote.connect.fleet import Fleet, FleetResult
from tfctl.remote.errors import RemoteError, RunLive
from tfctl.remote.runs.check import describe_holder
from tfctl.remote.runs.failure import explain
from tfctl.remote.runs.manifest import host_manifest
from tfctl.remote.runs.ports import ask, chosen_plan, fixed_ports, moved

Say = Callable[[str], None]
T = TypeVar("T")
WAIT_ROUND_S = 2.0
PHASES: tuple[tuple[str, ...], ...] = (("ps",), ("worker", "chief", "evaluator", "tensorboard"))


class LaunchFailed(RemoteError):
    """`up` could not start the job; `detail` holds the failing task's log tail."""

    def __init__(self, host: str, what: str, detail: str = "", cleaned: str = ""):
        super().__init__(host, what, detail, kind="launch")
        self.cleaned = cleaned

    def full(self) -> str:
        text = super().full()
        return f"{text}\nrolled back: {self.cleaned}" if self.cleaned else text


class Interrupted(KeyboardInterrupt):
    """Ctrl-C/SIGTERM during launch, raised after the rollback; `cleaned` says what it stopped."""

    def __init__(self, cleaned: str):
        super().__init__(cleaned)
        self.cleaned = cleaned


@dataclass(frozen=True)
class Started:
    task: str
    host: str
    pid: int
    pgid: int


def new_run_id() -> str:
    return time.strftime("%Y%m%d-%H%M%S") + "-" + secrets.token_hex(2)


def launch(fleet: Fleet, plan: Plan, run_id: str, say: Say, start_timeout_s: float = 120.0,
           ps_first: bool = True) -> list[Started]:
    """Start every task of `plan` as run `run_id`; roll back and raise `LaunchFailed` on error.

    `ps_first=False` starts every task at once (`up --all-at-once`): TensorFlow's workers and
    chief wait for parameter servers that are not up yet, so a job starts in one TensorFlow
    import instead of two; every task is still verified listening, and a failure still rolls
    everything back.
    """
    hosts = plan.hosts_used
    preflight = fleet.map(lambda t: _preflight(t.host.name, t, plan), hosts)
    raise_first(preflight, "preflight")
    planned, plan = plan, chosen_plan(plan, preflight.succeeded)  # where job.ports writes none
    if moved(planned, plan):
        say(f"ports taken elsewhere, chosen free: {', '.join(moved(planned, plan))}")
    started: list[Started] = []
    try:
        raise_first(fleet.map(lambda t: _prepare(t, plan, run_id, start_timeout_s), hosts),
                     "prepare")
        for phase in PHASES if ps_first else (tuple(t for p in PHASES for t in p),):
            names = [t.name for t in plan.tasks if t.type in phase]
            if not names:
                continue
            say(f"starting {', '.join(names)}")
            started += _start_phase(fleet, plan, run_id, phase, start_timeout_s)
    except BaseException as exc:
        raise rolled_back(fleet, plan, run_id, exc, say) from None
    return started


def rolled_back(fleet: Fleet, plan: Plan, run_id: str, exc: BaseException,
                say: Say) -> BaseException:
    """Stop everything run `run_id` started, then what to raise for `exc`: a `LaunchFailed`
    saying what was cleaned, `Interrupted` for Ctrl-C, anything else as it was."""
    interrupt = str(exc) if isinstance(exc, KeyboardInterrupt) else ""
    cleaned = rollback(fleet, plan, run_id, interrupt or None)
    if isinstance(exc, LaunchFailed):
        exc.cleaned = cleaned
        return exc
    if isinstance(exc, RemoteError):
        return LaunchFailed(exc.host, exc.what, exc.detail, cleaned)
    if isinstance(exc, KeyboardInterrupt):
        say(f"interrupted: {cleaned}")
        return Interrupted(cleaned)
    return exc


def _preflight(host: str, t: Any, plan: Plan) -> agentops.Raw | None:
    """The written ports judged; the ports the host chose for the others (None: none asked;
    no lease: this path checks and starts one host after the other's answer)."""
    judge_ports(host, agentops.ports(t, fixed_ports(plan, host)), plan)
    wanted = ask(plan, host, None)
    return None if wanted is None else agentops.choose_ports(t, wanted)


def task_ports(plan: Plan, host: str) -> list[int]:
    return sorted({x.port for x in plan.on_host(host) if x.port is not None})


def judge_ports(host: str, states: Iterable[agentops.PortState], plan: Plan) -> None:
    """Raise `LaunchFailed` for the first task port that is taken on `host`."""
    for state in states:
        port = state.port
        if not state.free:
            task = next(x.name for x in plan.on_host(host) if x.port == port)
            if state.run_id:
                raise LaunchFailed(host, f"run {state.run_id} is still live there "
                                         f"(its {state.task} holds port {port}): "
                                         "run `tfctl down` first")
            raise LaunchFailed(host, f"port {port} (for {task}) is already in use: "
                                     f"{describe_holder(state.raw)}; stop it or change job.ports")


def _prepare(t: Any, plan: Plan, run_id: str, start_timeout_s: float) -> None:
    host = t.host
    manifest = host_manifest(plan, host.name, run_id, start_timeout_s)
    try:
        agentops.prepare(t, host.workdir, run_id, manifest)
    except RunLive as exc:
        live = exc.data.get("run_id", "?")
        raise LaunchFailed(host.name, f"run {live} is still live there: run `tfctl down` "
                                      "first") from None


def _start_phase(fleet: Fleet, plan: Plan, run_id: str, phase: tuple[str, ...],
                 timeout_s: float) -> list[Started]:
    by_host = {h: [t.name for t in plan.on_host(h) if t.type in phase] for h in plan.hosts_used}
    by_host = {h: names for h, names in by_host.items() if names}

    cancel = threading.Event()

    def start(t: Any) -> list[Started]:
        host = t.host
        names = by_host[host.name]
        pids = agentops.launch(t, host.workdir, run_id, names).tasks
        waited = _wait_listening(t, run_id, names, timeout_s, cancel)
        judge_start(host.name, waited)
        return [Started(n, host.name, pids[n].pid, pids[n].pgid) for n in names]

    result = interruptible(lambda: fleet.map(start, list(by_host)), cancel)
    raise_first(result, "start")
    return [s for group in result.succeeded.values() for s in group]


def _wait_listening(t: Any, run_id: str, names: list[str], timeout_s: float,
                    cancel: threading.Event) -> dict[str, agentops.StartState]:
    """`wait_ports` in rounds of at most WAIT_ROUND_S until every task listens, ended, or the
    time is up; stops early (as a failure) once `cancel` is set."""
    deadline = time.monotonic() + timeout_s
    pending, done = list(names), {}
    while pending:
        if cancel.is_set():
            raise RemoteError(t.host.name, "interrupted while its tasks were starting")
        left = max(0.0, deadline - time.monotonic())
        last = left <= WAIT_ROUND_S
        answer = agentops.wait_ports(t, t.host.workdir, run_id, pending,
                                     min(left, WAIT_ROUND_S), call_timeout_s=WAIT_ROUND_S + 30)
        done.update({n: s for n, s in answer.items() if last or s.state != "timeout"})
        pending = [n for n in pending if n not in done]
    return done


def interruptible(run: Callable[[], T], cancel: threading.Event) -> T:
    """`run()` in a helper thread, so that Ctrl-C reaches us at once; on Ctrl-C, set `cancel`,
    let `run` wind down (its calls in flight end within one round), then re-raise."""
    box: dict[str, Any] = {}

    def body() -> None:
        try:
            box["value"] = run()
        except BaseException as exc:  # handed to the caller's thread below
            box["error"] = exc

    worker = threading.Thread(target=body, name="tfctl-start-phase", daemon=True)
    worker.start()
    try:
        while worker.is_alive():
            worker.join(0.2)
    except BaseException:
        cancel.set()
        worker.join()
        raise
    if "error" in box:
        raise box["error"]
    value: T = box["value"]
    return value


def judge_start(host: str, waited: Mapping[str, agentops.StartState]) -> None:
    for name, state in waited.items():
        if state.started:  # listening, or a fast task that already finished its work
            continue
        how = how_it_ended(state)
        if state.port_holder and not state.port_holder.get("free"):
            how += f" (port {state.port} {describe_holder(state.port_holder)})"
        failure = explain(state.last_lines, keep=8)  # the error line over stack frames
        detail = "\n".join(failure.lines) + (f"\nhint: {failure.hint}" if failure.hint else "")
        raise LaunchFailed(host, f"{name} {how}", detail)


def how_it_ended(state: agentops.StartState) -> str:
    if state.state == "timeout":
        return "did not start listening on its port in time"
    if state.error:
        return f"could not start: {state.error}"
    if state.signal:
        return f"was killed by {state.signal} at start"
    return f"exited {state.exit_code} at start"


def raise_first(result: FleetResult[Any], step: str) -> None:
    for host, exc in result.failed.items():
        if isinstance(exc, LaunchFailed):
            raise exc
        raise LaunchFailed(host, f"{exc.what}", exc.detail)


def rollback(fleet: Fleet, plan: Plan, run_id: str, cause: str | None = None) -> str:
    """Stop whatever this run started; return a sentence saying what was cleaned. The run is
    recorded aborted, with `cause` (an interrupt's words) when given."""
    from tfctl.remote.runs.stop import stop_run, stopped_tasks

    outcome = stop_run(fleet, run_id, plan.hosts_used, grace_s=3.0)
    stopped = stopped_tasks(outcome)
    left = ", ".join(outcome.failed) if outcome.failed else ""
    text = f"stopped {', '.join(stopped)}" if stopped else "nothing had started"
    if left:
        text += f"; could not reach {left} to clean up"
    # Per-host failures are collected by the fleet; the run dirs keep their logs either way.
    status = {"state": "aborted", **({"cause": cause} if cause else {})}
    fleet.map(lambda t: agentops.finish(t, t.host.workdir, run_id, status),
              [h for h in plan.hosts_used if h not in outcome.failed])
    return text

