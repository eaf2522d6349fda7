"""A task's log: written by its keeper (`TaskLog`), read by `status` and `logs`.

Part of the agent program (`__init__.py`): stdlib only, Python >= 3.8, Linux, no tfctl imports.

The task's stdout and stderr are a pipe the run's keeper (supervisor.py) relays into `<task>.log`,
so that neither a full disk nor a log's size is the task's problem: at the manifest's
`log_max_bytes` the log is rotated (`<task>.log.1` keeps the part before, older output is
dropped), and output that finds no room is dropped, counted, and said in the log once there is
room again; the task's own writes never fail for it. Readers take its last lines (`log_tail`)
or what was appended since an offset (`read_log_from`).
"""

from __future__ import annotations

import os
from typing import Any

LOG_MAX_BYTES = 256 << 20  # a manifest without log_max_bytes (`job.log_max_mb`)


class TaskLog:
    """A task's output as its keeper relays it: appended to `path`, rotated to `path.1` at
    `max_bytes`, and dropped (counted, said later) while the disk has no room for it."""

    def __init__(self, path: str, max_bytes: int) -> None:
        self.path, self.max_bytes = path, max(1, max_bytes)
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self.lost = 0

    def write(self, data: bytes) -> None:
        if self.lost:
            note = f"==> tfctl: {self.lost} bytes of output lost: no room on the disk\n"
            if self._put(note.encode()) < 0:
                self.lost += len(data)
                return
            self.lost = 0
        left = self._put(data)
        if left:
            self.lost += abs(left)

    def _put(self, data: bytes) -> int:
        """0 when `data` is written whole; else how many bytes were not (negative: none)."""
        view = memoryview(data)
        try:
            if os.fstat(self.fd).st_size + len(data) > self.max_bytes:
                self._rotate()
            while view:
                view = view[os.write(self.fd, view):]
        except OSError:
            return len(view) if len(view) < len(data) else -len(data)
        return 0

    def _rotate(self) -> None:
        """`path` becomes `path.1` (replacing the one before) and a new `path` is begun."""
        if os.fstat(self.fd).st_size == 0:
            return
        os.replace(self.path, self.path + ".1")
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        except OSError:  # no inode left: the log stays where it was
            os.replace(self.path + ".1", self.path)
            raise
        os.close(self.fd)
        self.fd = fd


def log_tail(path: str, lines: int, limit_bytes: int = 1 << 20) -> list[str]:
    """The last `lines` lines of a log, reading backwards from its end (at most `limit_bytes`)."""
    if lines <= 0:
        return []
    data = b""
    try:
        with open(path, "rb") as f:
            pos = f.seek(0, os.SEEK_END)
            while pos > 0 and data.count(b"\n") <= lines and len(data) < limit_bytes:
                step = min(8192, pos)
                pos -= step
                f.seek(pos)
                data = f.read(step) + data
    except OSError:
        return []
    return data.decode("utf-8", "replace").splitlines()[-lines:]


def read_log_from(path: str, offset: int, max_bytes: int) -> dict[str, Any]:
    """Bytes appended since `offset` (never splitting a UTF-8 character) and the next offset."""
    try:
        size = os.path.getsize(path)
    except OSError:
        size = 0
    reset = offset > size  # the file is shorter than what we read: start over
    if reset:
        offset = 0
    data = b""
    if size > offset:
        with open(path, "rb") as f:
            f.seek(offset)
            data = f.read(max(1, max_bytes))
    keep = _utf8_complete(data)
    return {"data": data[:keep].decode("utf-8", "replace"), "offset": offset + keep,
            "size": size, "reset": reset}


def _utf8_complete(data: bytes) -> int:
    """Length of `data` without a trailing incomplete UTF-8 sequence (a writer mid-character)."""
    for back in range(1, min(4, len(data)) + 1):
        byte = data[-back]
        if byte & 0xC0 != 0x80:  # the last lead (or ASCII) byte
            need = 1 if byte < 0x80 else 2 if byte >> 5 == 6 else 3 if byte >> 4 == 14 else 4
            return len(data) - back if need > back and len(data) > back else len(data)
    return len(data)
