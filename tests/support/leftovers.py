"""What a test session started that still runs: the session's marker and the check at its end.

`tests/conftest.py` exports `TFCTL_TEST_SESSION=<pid>-<start time>` of the pytest process before
any test runs, so every process the suite starts inherits it: commands, their connection
holders, `transport: local` agents and tasks, the lab's sshds, and (through the lab sshd's
`SetEnv`, tests/support/testbed/sshd.py) whatever a session on a lab host starts, detached or not.
The value names this one pytest process (a pid with its start time is unique until a reboot), so
another pytest running beside it, for another user or in another checkout, is never counted; a
pytest run by a test sets its own. A process that changed its environment away (a program given an
environment of its own, `env -i`) is not seen.

Read from `/proc/<pid>/environ` (the environment a process was started with), as
`tests/support/testbedtools.processes_of_run` finds a run's processes by its tag.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.support.procs import alive, stat_fields

SESSION_VAR = "TFCTL_TEST_SESSION"
HOLDER_MODULE = "tfctl.remote.connect.hold.holder"
"""The connection holder a command leaves for --persist seconds (remote/connect/hold): it
outlives the command that started it by design."""

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def session_token(pid: int | None = None) -> str:
    """`<pid>-<start time in clock ticks since boot>` of `pid` (this process by default)."""
    pid = os.getpid() if pid is None else pid
    return f"{pid}-{stat_fields(pid)[19]}"


@dataclass(frozen=True)
class Leftover:
    """A live process of the session: what it runs, who its parent is, when it started."""

    pid: int
    ppid: int
    started_s: float
    """Seconds since boot (CLOCK_BOOTTIME), as /proc/<pid>/stat's start time."""
    command: str

    def describe(self) -> str:
        return f"pid {self.pid} (parent {self.ppid}): {self.command[:200]}"

    @property
    def is_holder(self) -> bool:
        return HOLDER_MODULE in self.command


def processes_with_env(name: str, value: str) -> list[Leftover]:
    """Every live process (not a zombie, not this one) started with `name=value` in its
    environment."""
    needle = f"{name}={value}".encode()
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        pid = int(entry.name)
        try:
            if needle not in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0"):
                continue
            stat = stat_fields(pid)
            command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
        except (OSError, IndexError, ValueError):
            continue  # gone meanwhile, or not ours to read
        if stat[0] == "Z":
            continue
        found.append(Leftover(pid, int(stat[1]), int(stat[19]) / CLOCK_TICKS,
                              command.decode(errors="replace").strip()))
    return found


def session_processes(token: str) -> list[Leftover]:
    """The live processes that carry this session's marker."""
    return processes_with_env(SESSION_VAR, token)


def end(pids: Iterable[int], grace_s: float = 5.0) -> None:
    """SIGTERM each, wait up to `grace_s` for them to exit, then SIGKILL what is left."""
    pids = list(pids)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and any(alive(p) for p in pids):
        time.sleep(0.05)
    for pid in pids:
        if alive(pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def stop_groups(procs: Iterable[subprocess.Popen[Any]], grace_s: float) -> None:
    """End what a test started as process-group leaders: SIGTERM to each group still running,
    each waited for up to `grace_s`, and SIGKILL to the group of any that is not gone by then."""
    procs = list(procs)
    for proc in procs:
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):  # it may end in between
                os.killpg(proc.pid, signal.SIGTERM)
    for proc in procs:
        try:
            proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=grace_s)


def kill_started(procs: Iterable[subprocess.Popen[Any]]) -> None:
    """SIGKILL each of the processes a test started that still runs, and reap them all."""
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=10)


def wait_gone(token: str, timeout_s: float) -> list[Leftover]:
    """The session's processes still running after up to `timeout_s` (they may be exiting)."""
    deadline = time.monotonic() + timeout_s
    while True:
        left = session_processes(token)
        if not left or time.monotonic() >= deadline:
            return left
        time.sleep(0.2)


def boot_seconds() -> float:
    """Now, on the clock /proc's process start times count on (seconds since boot)."""
    return time.clock_gettime(time.CLOCK_BOOTTIME)
