"""Which boot of the host this is: the kernel's boot id, and when the host started.

Part of the agent program (`__init__.py`): stdlib only, Python >= 3.8, Linux, no tfctl imports.

A run's records carry the boot id they were written under (the manifest, each task's pid record,
the watcher's). A record from an earlier boot names processes that the host's restart ended,
however alike a pid and start time of this boot may look: both count from zero again at each
boot. Its task is `lost` to that restart, which `status` dates from the boot time.

The boot id is the random UUID the kernel makes at each boot (`/proc/sys/kernel/random/boot_id`,
proc(5)); the boot time is `btime` in `/proc/stat`, seconds since the epoch (proc(5)). Both are
read once per process (`_READ`): no process outlives the boot it started in.
"""

from __future__ import annotations

from typing import Any

BOOT_ID_PATH = "/proc/sys/kernel/random/boot_id"
STAT_PATH = "/proc/stat"
_READ: dict[str, Any] = {}
"""What this process read: "boot_id", "booted_at" (a dict, not functools.lru_cache, whose
import an agent start would pay for)."""


def boot_id() -> str | None:
    """This boot's id, or None where the kernel does not say (not Linux, /proc hidden)."""
    if "boot_id" not in _READ:
        try:
            with open(BOOT_ID_PATH) as f:
                _READ["boot_id"] = f.read().strip() or None
        except OSError:
            _READ["boot_id"] = None
    return _READ["boot_id"]


def booted_at() -> float | None:
    """When this boot began (wall-clock seconds), or None where /proc/stat does not say."""
    if "booted_at" not in _READ:
        _READ["booted_at"] = _btime()
    return _READ["booted_at"]


def _btime() -> float | None:
    try:
        with open(STAT_PATH, "rb") as f:
            for line in f:
                if line.startswith(b"btime "):
                    return float(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def from_other_boot(record: dict[str, Any] | None) -> bool:
    """The record was written under another boot of this host than the current one.

    A record without a boot id, or a host whose boot id cannot be read, is taken to be of this
    boot: nothing is called lost on a guess."""
    written = (record or {}).get("boot_id")
    current = boot_id()
    return bool(written) and current is not None and written != current


def boot_record() -> dict[str, Any]:
    """`{"boot_id": ...}`, for the records a run writes."""
    return {"boot_id": boot_id()}
