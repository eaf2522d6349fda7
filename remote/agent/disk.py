"""Room for a run's records on its host: they stop on a full disk, and say so without room.

Part of the agent program (`__init__.py`): stdlib only, Python >= 3.8, Linux, no tfctl imports.

The run's watcher (`watch.py`, through `record.py`) writes the records: events, GPU samples,
owners, speeds. A disk that fills up (the job's checkpoints, another user's files) must not end
the watcher, nor leave half a line in a record: below `LOW_BYTES` free in the run's filesystem,
or at the first write refused for room (ENOSPC, EDQUOT), the records stop; they resume above
`RESUME_BYTES`, and the gap is written into `events.jsonl` then (`records` event).

That they stopped is kept where it needs no room: `records.state`, a file of `STATE_BYTES` made
and filled when the watcher starts (while there is room), later only rewritten in place at
offset 0, padded to its length. Rewriting blocks a file already holds takes no new ones (ext4,
xfs, tmpfs); on a copy-on-write filesystem (btrfs, zfs) the rewrite may be refused too, and the
state stays in the watcher's memory. The status operation reads it (`records_state`).
"""

from __future__ import annotations

import contextlib
import errno
import os
import time
from typing import Any

from tfctl.remote.agent.wire import json_dumps, json_loads

STATE_FILE = "records.state"
STATE_BYTES = 4096
LOW_BYTES = 1 << 20
RESUME_BYTES = 4 << 20
ROOM_ERRNOS = (errno.ENOSPC, errno.EDQUOT)


def free_bytes(path: str) -> int | None:
    """Bytes an unprivileged writer may still use in `path`'s filesystem, or None (unknown)."""
    try:
        st = os.statvfs(path)
    except OSError:
        return None
    return st.f_bavail * st.f_frsize


def room_at(path: str) -> int | None:
    """`free_bytes` of the filesystem `path` is (or will be) on: its nearest existing folder."""
    while path and not os.path.isdir(path):
        parent = os.path.dirname(path)
        if parent == path:
            break
        path = parent
    return free_bytes(path or ".")


def room_words(exc: OSError) -> str:
    """What a refused write says of the disk: `disk full`, `disk quota exceeded`, or its error."""
    if exc.errno == errno.ENOSPC:
        return "disk full"
    if exc.errno == errno.EDQUOT:
        return "disk quota exceeded"
    return exc.strerror or str(exc)


class RecordSpace:
    """Whether the run's records may be written now (`ok`), kept in `records.state`."""

    def __init__(self, run_dir: str) -> None:
        self.run_dir = run_dir
        self.path = os.path.join(run_dir, STATE_FILE)
        self.stopped: dict[str, Any] | None = None
        self.fd: int | None = None
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError:
            return
        try:
            os.pwrite(fd, b" " * STATE_BYTES, 0)  # every block it will need, taken now
            os.fsync(fd)
        except OSError:  # already no room: memory only
            os.close(fd)
            return
        self.fd = fd

    @property
    def ok(self) -> bool:
        return self.stopped is None

    def check(self) -> dict[str, Any] | None:
        """Stop or resume by the room left; once resumed, the stop that ended (else None)."""
        free = free_bytes(self.run_dir)
        if free is None:
            return None
        if self.stopped is None and free < LOW_BYTES:
            self.stop("disk full", free)
        elif self.stopped is not None and free >= RESUME_BYTES:
            ended = dict(self.stopped, resumed_at=round(time.time(), 3))
            self.stopped = None
            self._save({})
            return ended
        return None

    def failed(self, exc: OSError, record: str) -> None:
        """A record's write was refused: a disk without room stops the records."""
        if self.stopped is None and exc.errno in ROOM_ERRNOS:
            self.stop(room_words(exc), free_bytes(self.run_dir), record)

    def stop(self, why: str, free: int | None, record: str | None = None) -> None:
        self.stopped = {"since": round(time.time(), 3), "why": why, "free_bytes": free,
                        "record": record}
        self._save({"stopped": self.stopped})

    def _save(self, state: dict[str, Any]) -> None:
        if self.fd is None:
            return
        data = json_dumps(state, sort_keys=True).encode()
        if len(data) < STATE_BYTES:
            # Refused even in place (copy-on-write): the watcher's memory has it.
            with contextlib.suppress(OSError):
                os.pwrite(self.fd, data.ljust(STATE_BYTES), 0)

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def records_state(run_dir: str) -> dict[str, Any] | None:
    """Since when and why the run's records are stopped on this host, or None (recording)."""
    try:
        with open(os.path.join(run_dir, STATE_FILE), "rb") as f:
            text = f.read(STATE_BYTES).strip()
        state = json_loads(text.decode()) if text else {}
    except (OSError, ValueError):
        return None
    stopped = state.get("stopped") if isinstance(state, dict) else None
    return stopped if isinstance(stopped, dict) else None
