"""Stopping a run: its process groups and tagged processes; TERM, grace, KILL, verify. No names.

The agent on each host does the signalling and the verification (a scan of /proc for processes
carrying the run's `TFCTL_RUN_ID`), so a process that escaped its group is still found.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from tfctl.remote.connect import agentops
from tfctl.remote.connect.agentops import StopAnswer
from tfctl.remote.connect.fleet import Fleet, FleetResult


def stop_run(fleet: Fleet, run_id: str, hosts: Iterable[str], grace_s: float = 10.0,
             tasks: Iterable[str] | None = None) -> FleetResult[StopAnswer]:
    wanted = None if tasks is None else list(tasks)

    def stop(t: Any) -> StopAnswer:
        names = None if wanted is None else [n for n in wanted if n in _host_tasks(t, run_id)]
        if names == []:
            return StopAnswer()
        return agentops.stop(t, t.host.workdir, run_id, names, grace_s)

    return fleet.map(stop, list(hosts))


def stopped_tasks(result: FleetResult[StopAnswer]) -> list[str]:
    """Every task the hosts stopped, sorted."""
    return sorted(n for r in result.succeeded.values() for n in r.stopped)


def _host_tasks(t: Any, run_id: str) -> set[str]:
    status = agentops.status(t, t.host.workdir, run_id, tail=0)
    return {task["name"] for task in status.tasks}
