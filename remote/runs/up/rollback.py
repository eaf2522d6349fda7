"""What `up` does when it cannot finish: stop everything the run started, and say so.

Once `up` chose a run id, any failure or Ctrl-C (KeyboardInterrupt) stops every task the run
started on every host it used and records the run aborted, so nothing half-started stays
behind; the error then says what was cleaned (`LaunchFailed.cleaned`, `Interrupted.cleaned`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tfctl.inventory.plan import Plan
from tfctl.remote.connect.fleet import Fleet, FleetResult
from tfctl.remote.connect.session import agentops
from tfctl.remote.errors import LaunchFailed, RemoteError

Say = Callable[[str], None]


class Interrupted(KeyboardInterrupt):
    """Ctrl-C/SIGTERM during `up`'s start, raised after the rollback; `cleaned` says what it
    stopped."""

    def __init__(self, cleaned: str):
        super().__init__(cleaned)
        self.cleaned = cleaned


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


def raise_first(result: FleetResult[Any]) -> None:
    """The first host's failure as a `LaunchFailed` (itself where it is one)."""
    for host, exc in result.failed.items():
        if isinstance(exc, LaunchFailed):
            raise exc
        raise LaunchFailed(host, f"{exc.what}", exc.detail)
