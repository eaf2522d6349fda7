"""Stopping a run: its process groups and tagged processes; TERM, grace, KILL, verify. No names.

The agent on each host does the signalling and the verification (a scan of /proc for processes
carrying the run's `TFCTL_RUN_ID`), so a process that escaped its group is still found.
"""

from __future__ import annotations

from collections.abc import Iterable

from tfctl.remote.connect.fleet import Fleet, FleetResult
from tfctl.remote.connect.session import agentops
from tfctl.remote.connect.session.agentops import StopAnswer


def stop_run(fleet: Fleet, run_id: str, hosts: Iterable[str], grace_s: float = 10.0,
             tasks: Iterable[str] | None = None) -> FleetResult[StopAnswer]:
    """One `stop` request per host; with `tasks`, each host stops those of them it runs (it
    knows from the run's manifest, so no status read first)."""
    wanted = None if tasks is None else list(tasks)
    return fleet.map(lambda t: agentops.stop(t, t.host.workdir, run_id, wanted, grace_s),
                     list(hosts))


def stopped_tasks(result: FleetResult[StopAnswer]) -> list[str]:
    """Every task the hosts stopped, sorted."""
    return sorted(n for r in result.succeeded.values() for n in r.stopped)

