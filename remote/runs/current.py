"""Which run is current: a small state file beside the inventory, with the hosts as fallback.

The file is a convenience (ray PR#62169: launcher state drifts from reality); the hosts' run
directories are the truth. When the file is missing, the newest run found on the hosts wins.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any

from tfctl.inventory.model import Inventory
from tfctl.remote.connect.fleet import Fleet
from tfctl.remote.connect.session import agentops


@dataclass(frozen=True)
class CurrentRun:
    run_id: str
    source: str  # "state file" | "hosts"
    hosts: tuple[str, ...]


def state_path(inv: Inventory) -> str:
    return os.path.join(inv.base_dir, f".tfctl-state-{inv.name}.json")


def remember(inv: Inventory, run_id: str, hosts: tuple[str, ...]) -> None:
    path = state_path(inv)
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump({"run_id": run_id, "inventory": os.path.abspath(inv.path),
                   "hosts": list(hosts)}, fh)
    os.replace(tmp, path)


def read_state(inv: Inventory) -> dict[str, Any] | None:
    try:
        with open(state_path(inv), encoding="utf-8") as fh:
            data = json.load(fh)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and data.get("run_id") else None


def current_run(inv: Inventory, fleet: Fleet) -> CurrentRun | None:
    state = read_state(inv)
    if state is not None:
        return CurrentRun(str(state["run_id"]), "state file",
                          tuple(state.get("hosts") or (h.name for h in inv.hosts)))
    return find_run_on_hosts(fleet)


def find_run_on_hosts(fleet: Fleet) -> CurrentRun | None:
    """The newest run any host knows, preferring a live one; hosts that hold it are its hosts."""
    listing = fleet.map(lambda t: agentops.runs(t, t.host.workdir))
    runs: dict[str, dict[str, Any]] = {}
    for host, found in listing.succeeded.items():
        for run in found:
            entry = runs.setdefault(run.run_id, {"live": False, "hosts": []})
            entry["live"] = entry["live"] or run.live
            entry["hosts"].append(host)
    if not runs:
        return None
    best = max(runs, key=lambda rid: (runs[rid]["live"], rid))
    return CurrentRun(best, "hosts", tuple(runs[best]["hosts"]))
