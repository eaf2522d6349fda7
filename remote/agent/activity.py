"""A notebook session's user activity, as its run's watcher sees it: kernels executing.

Part of the agent program (`__init__.py`): stdlib only, Python >= 3.8, Linux, no tfctl imports.

A session's run directory has an `activity` file whose mtime is when its user was last active
(the lab's idle policy reads it). For a shell, its keeper touches it on a keystroke (its
terminal read: inventory/session.py). For a notebook, the run's watcher asks the run's Jupyter
server on the host's loopback every `POLL_S`, with the session's token, for its kernels
(`GET /api/kernels`, jupyter/jupyter_server's kernels handler: each kernel's `execution_state`
and `last_activity`): a kernel busy now, or one whose `last_activity` is newer than the last
look's, is activity. `last_activity` also moves when a kernel only answers a status request,
so only a change seen while the server was already looked at counts, never the first look.
"""

from __future__ import annotations

import os
from typing import Any

from tfctl.remote.agent.wire import json_loads

POLL_S = 5.0
ACTIVITY_FILE = "activity"


def touch(path: str) -> None:
    """Set `path`'s mtime to now (made empty where missing)."""
    try:
        with open(path, "a"):
            pass
        os.utime(path, None)
    except OSError:
        pass  # a full disk: the activity is not recorded, the session goes on


def kernels_activity(port: int, token: str, timeout_s: float = 3.0) -> list[dict[str, Any]]:
    """Jupyter's kernels on 127.0.0.1:`port` (`GET /api/kernels`); [] where it does not answer."""
    import urllib.request

    request = urllib.request.Request(f"http://127.0.0.1:{int(port)}/api/kernels",
                                     headers={"Authorization": f"token {token}"})
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as answer:
            found = json_loads(answer.read().decode("utf-8", "replace"))
    except (OSError, ValueError):
        return []
    return [k for k in found if isinstance(k, dict)] if isinstance(found, list) else []


def active(kernels: list[dict[str, Any]], seen: dict[str, str]) -> bool:
    """Whether `kernels` show activity since `seen` (kernel id → its last_activity then),
    which is brought up to date; a kernel not seen before counts (it was just started)."""
    busy = False
    for kernel in kernels:
        kid, last = str(kernel.get("id")), str(kernel.get("last_activity") or "")
        if kernel.get("execution_state") == "busy" or seen.get(kid, "") != last:
            busy = True
        seen[kid] = last
    for kid in set(seen) - {str(k.get("id")) for k in kernels}:
        del seen[kid]
    return busy


def watch_notebook(run_dir: str, workdir: str, port: int, token_file: str, stop: Any) -> None:
    """Touch the run's activity file whenever a kernel of its Jupyter server was active, until
    `stop` (a threading.Event) is set."""
    path = os.path.join(run_dir, ACTIVITY_FILE)
    touch(path)  # the session's start is its user's doing
    seen: dict[str, str] = {}
    token = None
    while not stop.wait(POLL_S):
        if token is None:
            try:
                with open(os.path.join(workdir, token_file)) as f:
                    token = f.read().strip()
            except OSError:
                continue
        if active(kernels_activity(port, token), seen):
            touch(path)


def start_activity(run_dir: str, manifest: dict[str, Any]) -> Any:
    """For a notebook session's run, a thread of the watcher that keeps its activity file
    (`watch_notebook`); the threading.Event that stops it; None for any other run (threading
    is imported only then: an agent start pays for no module it does not use)."""
    record = manifest.get("oneoff") or {}
    if record.get("session") != "notebook" or not record.get("port"):
        return None
    import threading
    stop = threading.Event()
    threading.Thread(target=watch_notebook, name="tfctl-activity", daemon=True,
                     args=(run_dir, _workdir(run_dir), int(record["port"]),
                           str(record.get("token_file")), stop)).start()
    return stop


def _workdir(run_dir: str) -> str:
    """The workdir of a run directory (`<workdir>/.tfctl/runs/<run>`)."""
    return os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(run_dir))))


def last_activity(run_dir: str) -> float | None:
    """When the session's user was last active (the activity file's mtime), or None."""
    try:
        return os.stat(os.path.join(run_dir, ACTIVITY_FILE)).st_mtime
    except OSError:
        return None

