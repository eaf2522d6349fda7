"""This machine's processes as /proc shows them (the testbed's hosts share it): whether one
still runs, its parent, its children and everything below it."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path


def stat_fields(pid: int) -> list[str]:
    """/proc/<pid>/stat's fields from the state on (field 3): state, ppid, ..., starttime at
    [19]. OSError once the process is gone."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def alive(pid: int) -> bool:
    """The process runs: it exists and is neither a zombie nor dead."""
    try:
        return stat_fields(pid)[0] not in ("Z", "X")
    except (OSError, IndexError):
        return False


def parent_of(pid: int) -> int:
    return int(stat_fields(pid)[1])


def children(pid: int) -> list[int]:
    """The processes whose parent is `pid`."""
    found = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            with contextlib.suppress(OSError, IndexError, ValueError):
                if parent_of(int(entry.name)) == pid:
                    found.append(int(entry.name))
    return found


def children_named(pid: int, comm: str) -> list[int]:
    """The children of `pid` whose command name (/proc/<pid>/comm) is `comm`."""
    found = []
    for child in children(pid):
        with contextlib.suppress(OSError):
            if Path(f"/proc/{child}/comm").read_text().strip() == comm:
                found.append(child)
    return found


def descendants(pid: int) -> set[int]:
    """Every process below `pid`."""
    out: set[int] = set()
    todo = [pid]
    while todo:
        for child in children(todo.pop()):
            if child not in out:
                out.add(child)
                todo.append(child)
    return out
