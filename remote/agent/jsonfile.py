"""The agent's records on disk: JSON written atomically (or, without room, into room kept for
it) and read back, each stamped with `now()`.

One line each, sorted keys, through `wire.json_dumps`/`json_loads` (CPython's JSON accelerator):
`json.dump` would write through json's pure-Python encoder (it uses the accelerator only for
`dumps` without indent), a chunk per write, and importing json costs an agent start `re`.

Part of the agent program (`__init__.py`): stdlib only, Python >= 3.8, Linux, no tfctl imports.
"""

from __future__ import annotations

import contextlib
import os
import time
from typing import Any

from tfctl.remote.agent.wire import json_dumps, json_loads


def now() -> float:
    """A time stamp as the records carry it: epoch seconds, to the millisecond."""
    return round(time.time(), 3)


def write_json(path: str, value: Any) -> None:
    """Write atomically (temp file + rename): readers never see half a record, and a write
    that fails (no room) leaves no temp file behind."""
    tmp = f"{path}.{os.getpid()}.tmp"
    try:
        with open(tmp, "w") as f:
            f.write(json_dumps(value, sort_keys=True))
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def write_json_when_room(path: str, value: Any, every_s: float = 1.0,
                         slot: str | None = None) -> None:
    """`write_json`, where the disk has no room for it (ENOSPC, EDQUOT) written into `slot`
    (a file `reserve_slot` filled while there was room, rewritten in place: no new blocks)
    renamed to `path`, else tried again every `every_s`: a task's end must reach its record,
    which status and the job's end read."""
    import errno

    while True:
        try:
            write_json(path, value)
            if slot is not None:
                with contextlib.suppress(OSError):
                    os.unlink(slot)
            return
        except OSError as exc:
            if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
                raise
        data = json_dumps(value, sort_keys=True).encode()
        if slot is not None and len(data) <= SLOT_BYTES:
            try:
                fd = os.open(slot, os.O_WRONLY)
                try:
                    os.pwrite(fd, data.ljust(SLOT_BYTES), 0)  # JSON allows trailing blanks
                finally:
                    os.close(fd)
                os.replace(slot, path)
                return
            except OSError:
                slot = None  # no slot after all: wait for room
        time.sleep(every_s)


SLOT_BYTES = 4096


def reserve_slot(path: str) -> str | None:
    """A file of SLOT_BYTES blanks at `path`, its blocks taken now; None without room."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    except OSError:
        return None
    try:
        os.pwrite(fd, b" " * SLOT_BYTES, 0)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(path)
        return None
    finally:
        os.close(fd)
    return path


def read_json(path: str) -> Any:
    try:
        with open(path) as f:
            return json_loads(f.read())
    except (OSError, ValueError):
        return None
