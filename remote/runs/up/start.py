"""`up`'s start: every task started, phase by phase, each host answering once its own are up.

One `up_go` agent request per host and phase (host side remote/agent/up.py) prepares the run
(its manifest, the output folders, the cached setup log's copy), starts the host's tasks of the
phase and their supervisors and the run's watcher, waits on the host until they listen or die,
and with the host's tasks all up answers with the host's status.

By default every task starts at once: TensorFlow's workers and chief wait for parameter servers
that are not up yet, so a job starts in one TensorFlow import instead of two. With `--ps-first`
(docs/field-notes.md §1) the ps phase comes first and the rest only once every ps listens, on
every host; a worker may not start before.

Each `up_go` waits at most `WAIT_ROUND_S` before it answers, so that Ctrl-C is acted on within
one round, after the requests in flight have returned (stopping before they returned could
miss tasks they were still starting), not after the whole wait for ports. A task that does not
start raises `LaunchFailed` with its last log lines; the caller rolls the run back (rollback.py).
"""

from __future__ import annotations

import secrets
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from tfctl.inventory.plan import Plan
from tfctl.remote.connect.fleet import Fleet
from tfctl.remote.connect.session import agentops
from tfctl.remote.connect.session.agentops import StatusAnswer
from tfctl.remote.errors import LaunchFailed, PortTaken, RemoteError, RunLive
from tfctl.remote.runs.check import describe_holder
from tfctl.remote.runs.failure import explain
from tfctl.remote.runs.status import RunStatus, status_from
from tfctl.remote.runs.up.manifest import host_manifest
from tfctl.remote.runs.up.ports import chosen_ports
from tfctl.remote.runs.up.rollback import raise_first

Say = Callable[[str], None]
T = TypeVar("T")
WAIT_ROUND_S = 2.0
PHASES: tuple[tuple[str, ...], ...] = (("ps",), ("worker", "chief", "evaluator", "tensorboard"))


def new_run_id() -> str:
    return time.strftime("%Y%m%d-%H%M%S") + "-" + secrets.token_hex(2)


def start_tasks(fleet: Fleet, plan: Plan, run_id: str, say: Say, ps_first: bool,
                timeout_s: float, setup_logs: Mapping[str, str], token: str) -> RunStatus:
    """Every task of `plan` started as run `run_id`, verified up; the run's status.
    `setup_logs`: host → its cached setup log, copied into the run directory; `token`: the
    port leases of the check, which each host drops once its tasks are up."""
    phases = PHASES if ps_first else (tuple(t for p in PHASES for t in p),)
    hosts = list(plan.hosts_used)
    asked_at = time.time()
    answers: Mapping[str, StatusAnswer | None] = {}
    for i, phase in enumerate(phases):
        first, final = i == 0, i == len(phases) - 1
        by_host = {h: [t.name for t in plan.on_host(h) if t.type in phase] for h in hosts}
        names = [t.name for t in plan.tasks if t.type in phase]
        if names:
            say(f"starting {', '.join(names)}")
        elif not (first or final):
            continue
        asked_at = time.time()
        cancel = threading.Event()

        def go(t: Any, first: bool = first, final: bool = final,
               by_host: Mapping[str, list[str]] = by_host,
               cancel: threading.Event = cancel) -> StatusAnswer | None:
            host = t.host.name
            manifest = host_manifest(plan, host, run_id, timeout_s) if first else None
            return _go_host(t, run_id, by_host[host], manifest, setup_logs.get(host),
                            timeout_s, final, cancel,
                            chosen_ports(plan, host) if first else [], token if final else None,
                            ended_ok=plan.oneoff is not None)

        result = interruptible(lambda: fleet.map(go, hosts), cancel)
        raise_first(result)
        answers = result.succeeded
    missing = [h for h, a in answers.items() if a is None]
    read = fleet.map(lambda t: agentops.status(t, t.host.workdir, run_id, tail=1), missing)
    found = {h: a for h, a in answers.items() if a is not None}
    found.update(read.succeeded)
    return status_from(fleet.inventory.job, run_id, found,
                       {h: str(e) for h, e in read.failed.items()}, asked_at)


def _go_host(t: Any, run_id: str, names: list[str], manifest: Mapping[str, Any] | None,
             setup_log: str | None, timeout_s: float, final: bool,
             cancel: threading.Event, verify: list[int],
             token: str | None, ended_ok: bool = False) -> StatusAnswer | None:
    """One host's phase: prepare (with `manifest`), start `names`, and wait in rounds of at most
    WAIT_ROUND_S until each listens or ended, or the time is up; stops early (as a failure) once
    `cancel` is set. Its status when `final` and every task is up (else None). `verify`: the
    ports its check chose, refused if taken since (then nothing starts there); `token`: the
    leases the host drops once its tasks are up. `ended_ok`: a task that ended, however, has
    run (a one-off command's: its exit status is the run's, `judge_start`)."""
    host = t.host
    deadline = time.monotonic() + timeout_s
    launch, pending, done = list(names), list(names), {}
    while True:
        if cancel.is_set():
            raise RemoteError(host.name, "interrupted while its tasks were starting")
        left = max(0.0, deadline - time.monotonic())
        last = left <= WAIT_ROUND_S
        try:
            answer = agentops.up_go(t, host.workdir, run_id, manifest=manifest,
                                    setup_log=setup_log, launch=launch, wait=pending,
                                    timeout_s=min(left, WAIT_ROUND_S),
                                    status_tail=1 if final else None, verify_ports=verify,
                                    lease_token=token)
        except RunLive as exc:
            raise LaunchFailed(host.name, f"run {exc.data.get('run_id', '?')} is still "
                                          "live there: run `tfctl down` first") from None
        except PortTaken as exc:
            raise LaunchFailed(host.name, f"{exc.what}: run `tfctl up` again") from None
        manifest, launch, verify = None, [], []
        done.update({n: s for n, s in answer.waited.items() if last or s.state != "timeout"})
        pending = [n for n in pending if n not in done]
        if not pending:
            judge_start(host.name, done, ended_ok)
            return answer.status


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


def judge_start(host: str, waited: Mapping[str, agentops.StartState],
                ended_ok: bool = False) -> None:
    """Raise `LaunchFailed` for the first task that did not start, with how it ended; with
    `ended_ok` (a one-off command), a task that ended has run, whatever its exit status."""
    for name, state in waited.items():
        if state.started or (ended_ok and state.state in ("exited", "killed")):
            continue  # listening, or a fast task that already finished its work
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
