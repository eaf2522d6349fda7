"""Which run is current: a small state file of the user's, with the hosts as fallback.

The file is a convenience (ray PR#62169: launcher state drifts from reality); the hosts' run
directories are the truth. When the file is missing, the newest run found on the hosts wins.

It is the user's own, not the inventory's: one `cluster.yaml` in a shared folder may serve a
whole lab, which every student reads and none may write, and each student's run is their own.
So it lives in the user's state folder (`$XDG_STATE_HOME/tfctl`, else `~/.local/state/tfctl`,
as the XDG Base Directory Specification places state that outlives a command), one file per
inventory, named by the inventory's name and a digest of its real path. A file an older tfctl
wrote beside the inventory (`.tfctl-state-<name>.json`) is read while the new one is missing,
when it is the user's own, and moved into the state folder on that first read.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
import threading
from dataclasses import dataclass
from typing import Any

from tfctl.inventory.model import Inventory
from tfctl.remote.connect.fleet import Fleet
from tfctl.remote.connect.session import agentops
from tfctl.remote.errors import FleetError


@dataclass(frozen=True)
class CurrentRun:
    run_id: str
    source: str  # "state file" | "hosts"
    hosts: tuple[str, ...]


class StateUnwritable(FleetError):
    """tfctl cannot write the user's state folder, where it remembers the current run."""

    def __init__(self, what: str) -> None:
        super().__init__(what, kind="state_unwritable")


def state_dir() -> str:
    """`$XDG_STATE_HOME/tfctl` (an absolute path, as the specification requires), else
    `~/.local/state/tfctl`."""
    base = os.environ.get("XDG_STATE_HOME", "")
    if not os.path.isabs(base):
        base = os.path.join(os.path.expanduser("~"), ".local", "state")
    return os.path.join(base, "tfctl")


def state_file(inventory_path: str, name: str) -> str:
    """The state file of the inventory at `inventory_path` named `name`: one per real path."""
    real = os.path.realpath(inventory_path)
    digest = hashlib.sha256(real.encode("utf-8", "surrogateescape")).hexdigest()[:16]
    return os.path.join(state_dir(), f"{name}-{digest}.json")


def state_path(inv: Inventory) -> str:
    return state_file(inv.path, inv.name)


def legacy_state_path(inv: Inventory) -> str:
    """Where an older tfctl kept the state file: beside the inventory."""
    return os.path.join(inv.base_dir, f".tfctl-state-{inv.name}.json")


def check_state_writable(inv: Inventory) -> None:
    """Raise `StateUnwritable` unless the state folder can be made and written: asked before
    anything starts, so that a run is never left without its state."""
    folder = state_dir()
    try:
        os.makedirs(folder, mode=0o700, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".probe-", dir=folder)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise StateUnwritable(
            f"cannot write tfctl's state folder {folder} ({exc.strerror or exc}), where it "
            f"remembers the current run of {inv.path}: set XDG_STATE_HOME to a folder you "
            "can write; nothing was started") from None


def remember(inv: Inventory, run_id: str, hosts: tuple[str, ...]) -> None:
    write_state(inv, {"run_id": run_id, "inventory": os.path.realpath(inv.path),
                      "hosts": list(hosts)})


def write_state(inv: Inventory, data: dict[str, Any]) -> None:
    """`data` (whose `run_id` has started) as the inventory's state, written atomically;
    `StateUnwritable` saying how that run is stopped when it cannot be written."""
    path = state_path(inv)
    tmp = f"{path}.{os.getpid()}.{threading.get_ident()}.tmp"  # a sweep starts points at once
    try:
        os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump(data, fh)
        os.replace(tmp, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        before = _read(path)
        stop = ("`tfctl down` finds it on the hosts and stops it" if before is None else
                f"`tfctl down` would stop run {before['run_id']}, which the state file still "
                f"names: remove {path}, then `tfctl down` finds run {data['run_id']} on the "
                "hosts and stops it")
        raise StateUnwritable(
            f"run {data['run_id']} started, but tfctl could not write {path} "
            f"({exc.strerror or exc}) to remember it as the current run; {stop}") from None


def read_state(inv: Inventory) -> dict[str, Any] | None:
    data = _read(state_path(inv))
    if data is not None:
        return data
    return _migrate(inv)


def _read(path: str) -> dict[str, Any] | None:
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and data.get("run_id") else None


def _migrate(inv: Inventory) -> dict[str, Any] | None:
    """The state file an older tfctl left beside the inventory, when it is this user's (another
    user's run is not theirs to call current), copied into the state folder and removed where
    that can be done; None when there is none."""
    old = legacy_state_path(inv)
    try:
        if os.stat(old).st_uid != os.getuid():
            return None
    except OSError:
        return None
    data = _read(old)
    if data is None:
        return None
    try:
        write_state(inv, data)
    except StateUnwritable:
        return data  # read where it is, until the state folder can be written
    with contextlib.suppress(OSError):
        os.unlink(old)
    return data


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
