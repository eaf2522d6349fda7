"""The connection holders and agent sessions of commands that keep their connections, found in
this machine's /proc (the testbed's hosts share it): which holder serves a socket folder, which
agent sessions run on each host. The `held` fixture (tests/support/fixtures.py) gives a test
commands that keep their connections and ends their holder afterwards."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.support.testbedtools import wait_until

HOLDER = "tfctl.remote.connect.hold.holder"
"""The module a holder process runs (`python -m`), as its command line names it."""


def cmdline(pid: int) -> str:
    """The process's command line, words joined by spaces ("" once it is gone)."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def holders(runtime: Path) -> list[int]:
    """The holder processes whose socket is in `runtime`."""
    return [int(e) for e in os.listdir("/proc") if e.isdigit()
            and HOLDER in (c := cmdline(int(e))) and str(runtime) in c]


def _parent_is_sshd(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        parent = int(stat[stat.rindex(")") + 2:].split()[1])
        return Path(f"/proc/{parent}/comm").read_text().strip() == "sshd"
    except (OSError, ValueError):
        return False


def agents(testbed: Any) -> dict[str, set[int]]:
    """host → the pids of the agent sessions there (`python -S -c BOOT agent_…` under an SSH
    session; the run's supervisors and watcher, forked from an agent, are not sessions)."""
    return {h: {p for p in testbed.pids_in(h) if "/.tfctl/agent/agent_" in cmdline(p)
                and " -S -c " in cmdline(p) and _parent_is_sshd(p)} for h in testbed.names}


def one_per_host(testbed: Any) -> Callable[[], dict[str, set[int]] | None]:
    """A probe for `wait_until`: the agent sessions once every host has one, else None."""
    def probe() -> dict[str, set[int]] | None:
        found = agents(testbed)
        return found if all(found.values()) else None
    return probe


def wait_holders(runtime: Path, timeout_s: float = 20) -> list[int]:
    """The holders serving `runtime`, once there is one."""
    found: list[int] = wait_until("a holder", lambda: holders(runtime), timeout_s, every_s=0.05)
    return found


def wait_sessions(testbed: Any, timeout_s: float = 20) -> dict[str, set[int]]:
    """The agent sessions, once every host has one in the holder."""
    found: dict[str, set[int]] = wait_until("an agent session per host in the holder",
                                            one_per_host(testbed), timeout_s, every_s=0.05)
    return found


def wait_sessions_gone(testbed: Any, kept: dict[str, set[int]], timeout_s: float = 10) -> None:
    """Until none of the agent sessions `kept` runs on its host any more."""
    wait_until("the kept agent sessions gone from the hosts",
               lambda: not any(agents(testbed)[h] & kept[h] for h in testbed.names),
               timeout_s, every_s=0.05)
