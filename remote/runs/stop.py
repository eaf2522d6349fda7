"""Stopping a run: its process groups and tagged processes; TERM, grace, KILL, verify. No names.

The agent on each host does the signalling and the verification (a scan of /proc for processes
carrying the run's `TFCTL_RUN_ID`), so a process that escaped its group is still found.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from tfctl.remote.connect import agentclient
from tfctl.remote.connect.fleet import Fleet, FleetResult


def stop_run(fleet: Fleet, run_id: str, hosts: Iterable[str], grace_s: float = 10.0,
             tasks: Iterable[str] | None = None) -> FleetResult[dict[str, Any]]:
    wanted = None if tasks is None else list(tasks)

    def stop(t: Any) -> dict[str, Any]:
        names = None if wanted is None else [n for n in wanted if n in _host_tasks(t, run_id)]
        if names == []:
            return {"stopped": [], "killed_after_grace": [], "remaining_pids": [], "gpu_pids": []}
        result: dict[str, Any] = agentclient.call(
            t, "stop", {"workdir": t.host.workdir, "run_id": run_id, "tasks": names,
                        "grace_s": grace_s}, timeout_s=grace_s + 60)
        return result

    return fleet.map(stop, list(hosts))


def _host_tasks(t: Any, run_id: str) -> set[str]:
    status = agentclient.call(t, "status", {"workdir": t.host.workdir, "run_id": run_id,
                                            "tail": 0})
    return {task["name"] for task in status.get("tasks", [])}
