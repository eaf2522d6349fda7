"""The agent's cheap wait for task ports.

Part of the agent program (`__init__.py`): stdlib only, Python >= 3.8, Linux, no tfctl imports.
A full look at a run's tasks (`state.observe`: every /proc entry's environ and stat,
/proc/net/tcp) costs ~10 ms, and polling it every 0.1 s on 16 lab hosts that share two cores ate
most of their CPU while the tasks were starting. Between full looks this waits on cheap signals:
an exit record appearing, the task's port accepting a connection on 127.0.0.1 (what a peer would
do), a pid record old enough for a task without a port (`state.settled`). A full look every
second still catches a task that listens on another address only.
"""

from __future__ import annotations

import os
import time
from typing import Any

from tfctl.remote.agent.jsonfile import read_json
from tfctl.remote.agent.rundir import task_file
from tfctl.remote.agent.state import settled, wait_for_ports
from tfctl.remote.agent.trace import mark_run

FULL_LOOK_EVERY_S = 1.0


def wait_until_up(run_dir: str, run_id: str, manifest: dict[str, Any],
                  tasks: list[dict[str, Any]], timeout_s: float) -> dict[str, Any]:
    """`state.wait_for_ports`' answer, with full looks only when cheap signals say one
    may be conclusive (or once a second, or at the deadline); `seen`: the last look (`observe`)
    of the tasks it covered, for a status that follows at once."""
    deadline = time.time() + timeout_s
    results: dict[str, Any] = {}
    seen: dict[str, Any] = {}
    pause, next_look, quiet_until = 0.01, time.time() + FULL_LOOK_EVERY_S, 0.0
    while True:
        pending = [t for t in tasks if t["name"] not in results]
        now = time.time()
        last = now >= deadline
        clock = last or now >= next_look
        if clock or _may_be_up(run_dir, pending, now >= quiet_until):
            looked = wait_for_ports(run_dir, run_id, manifest, [t["name"] for t in pending], 0.0)
            seen = looked["seen"]
            results.update({name: state for name, state in looked["tasks"].items()
                            if last or state["state"] != "timeout"})
            mark_run(run_dir, "look", settled=len(results), tasks=len(tasks))
            if len(results) == len(tasks):
                break
            # Not conclusive. After a look the cheap signals called for (a port answered for
            # someone else?), only the clock or an exit record calls for the next one; after
            # the clock's, the probes go on: the tasks still starting answer within 50 ms.
            next_look = time.time() + FULL_LOOK_EVERY_S
            if not clock:
                quiet_until = next_look
        time.sleep(min(pause, max(0.0, deadline - time.time())))
        pause = min(pause * 1.5, 0.05)  # a probe costs ~0.1 ms: answer within 50 ms
    lost = [name for name, state in results.items() if state["state"] == "lost"]
    if lost:  # seen just before its keeper's exit record: look once more
        looked = wait_for_ports(run_dir, run_id, manifest, lost, 0.0)
        results.update(looked["tasks"])
        seen = looked["seen"]
    ready = all(r["state"] in ("listening", "running") for r in results.values())
    return {"tasks": {t["name"]: results[t["name"]] for t in tasks}, "ready": ready,
            "seen": seen}


def _may_be_up(run_dir: str, tasks: list[dict[str, Any]], probe_ports: bool) -> bool:
    """True when a task has ended, or (if `probe_ports`) every task answers on its port (or
    has started, if it has no port): then a full look can settle it."""
    for task in tasks:
        if os.path.exists(task_file(run_dir, task["name"], ".exit.json")):
            return True
    return probe_ports and all(
        _accepts(int(t["port"])) if t.get("port") else
        settled(read_json(task_file(run_dir, t["name"], ".pid.json"))) for t in tasks)


def _accepts(port: int) -> bool:
    import socket

    try:
        # the address as bytes: a str is encoded with the idna codec (unicodedata, stringprep)
        loopback: Any = b"127.0.0.1"  # getaddrinfo takes bytes; typeshed says str only
        socket.create_connection((loopback, port), timeout=0.2).close()
    except OSError:
        return False
    return True
