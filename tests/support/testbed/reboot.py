"""A lab host restarted as far as tfctl can tell: every process gone, a new boot, sshd back.

A lab host is a network namespace whose sshd (started through `ip netns exec`, which gives it a
mount namespace of its own, slave to this machine's) serves every SSH session. `restart_host`
kills every process of the host but the sshd listener, as a power cut would, then gives the
host a new boot: a new boot id over `/proc/sys/kernel/random/boot_id` and a `/proc/stat` whose
`btime` is now, both bind-mounted inside the sshd's mount namespace only (as LXCFS shows a
container its own /proc files), so every later session, the agent's included, reads them with
no hook in tfctl. `undo` takes the mounts away again. Root and the isolated lab only.
"""

from __future__ import annotations

import subprocess
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from tests.support import procs
from tests.support.testbed.testbed import LabUnsupported, Testbed

BOOT_ID = "/proc/sys/kernel/random/boot_id"
STAT = "/proc/stat"


@dataclass(frozen=True)
class Boot:
    boot_id: str
    booted_at: int
    """`btime`: the new boot's start, whole seconds since the epoch."""


def restart_host(testbed: Testbed, name: str) -> Boot:
    """Kill every process of host `name` (sshd's listener kept) and give it a new boot."""
    if not testbed.isolated:
        raise LabUnsupported("a host restart needs the isolated (root, ip netns) lab")
    killed = testbed.kill_strays(name)
    deadline = time.monotonic() + 10
    while alive := [pid for pid in killed if procs.alive(pid)]:
        if time.monotonic() > deadline:
            raise RuntimeError(f"processes of {name} outlived SIGKILL: {alive}")
        time.sleep(0.05)
    boot = Boot(str(uuid.uuid4()), int(time.time()))
    folder = testbed.host(name).dir / "boot"
    folder.mkdir(exist_ok=True)
    (folder / "boot_id").write_text(boot.boot_id + "\n")
    lines = Path(STAT).read_text().splitlines(keepends=True)
    (folder / "stat").write_text("".join(f"btime {boot.booted_at}\n" if line.startswith("btime ")
                                         else line for line in lines))
    for source, target in ((folder / "boot_id", BOOT_ID), (folder / "stat", STAT)):
        _in_sshd_mounts(testbed, name, "mount", "--bind", str(source), target)
    return boot


def undo(testbed: Testbed, name: str) -> None:
    """The host's own boot again: every mount `restart_host` made there taken away."""
    for target in (BOOT_ID, STAT):
        while _in_sshd_mounts(testbed, name, "umount", target, check=False).returncode == 0:
            continue


def _in_sshd_mounts(testbed: Testbed, name: str, *argv: str,
                    check: bool = True) -> subprocess.CompletedProcess[str]:
    pid = testbed.sshd_pid(name)
    if pid is None:
        raise RuntimeError(f"the sshd of {name} is not running")
    return subprocess.run(["nsenter", "-t", str(pid), "-m", *argv], capture_output=True,
                          text=True, check=check, timeout=30)
