"""A few small changed files go to a host through its agent session, not through rsync.

After `sync_diff` has said which paths differ, rsync costs a second SSH session, an rsync server
on the host and a local rsync with its bridge: ~0.2 s before the first byte, for what is usually
one edited source file. When every differing path is a regular file and all of them together
are small, they travel instead in one request to the agent already running for the command
(`put_files` in agent/sync.py writes each atomically with its mode and mtime, as rsync -a
would). Anything else (folders, links, a file changed again since it was listed, a path the
agent refuses) goes to rsync.
"""

from __future__ import annotations

import base64
import functools
import os
import stat
import zlib
from dataclasses import dataclass
from typing import Any

from tfctl.remote.agent.sync import entry_signature
from tfctl.remote.connect.session import agentops
from tfctl.remote.connect.transport import Transport
from tfctl.remote.errors import AgentUnavailable, HostUnreachable, RemoteError

PUT_MAX_BYTES = 4 * 1024 * 1024
PUT_MAX_FILES = 256


@dataclass(frozen=True)
class Put:
    written: tuple[str, ...]
    bytes_sent: int
    left: tuple[str, ...]
    """Paths still to send (by rsync): refused by the agent, or not tried."""


def worth_putting(signatures: dict[str, str], differ: list[str]) -> bool:
    """True when every differing path is a regular file and together they are small."""
    if not differ or len(differ) > PUT_MAX_FILES:
        return False
    total = 0
    for path in differ:
        sig = signatures.get(path, "")
        if not sig.startswith("f:"):
            return False
        total += int(sig.split(":")[1])
    return total <= PUT_MAX_BYTES


def put_changed(t: Transport, source: str, dest: str, differ: list[str],
                signatures: dict[str, str]) -> Put:
    """Send `differ` (paths relative to `source`) to `dest` on the host over the agent."""
    files = _packed_files(source, tuple((rel, signatures[rel]) for rel in differ))
    if files is None:  # a file changed again (or went) since it was listed: rsync decides
        return Put((), 0, tuple(differ))
    try:
        answer = agentops.put_files(t, dest, files, timeout_s=120)
    except (HostUnreachable, AgentUnavailable):
        raise  # rsync would not get through either; the agent cannot run there
    except RemoteError:
        return Put((), 0, tuple(differ))  # e.g. a folder where the file goes: rsync handles it
    done = set(answer.written)
    return Put(answer.written, answer.bytes, tuple(p for p in differ if p not in done))


def new_sync() -> None:
    """Forget what was packed for an earlier sync: a file rewritten within the same second keeps
    its signature, so packed contents are shared only by the hosts of one sync."""
    _packed_files.cache_clear()


@functools.lru_cache(maxsize=2)  # the hosts of one sync usually differ alike: read and pack once
def _packed_files(source: str, wanted: tuple[tuple[str, str], ...]) -> list[list[Any]] | None:
    files: list[list[Any]] = []
    for rel, signature in wanted:
        packed = _pack(os.path.join(source, rel), signature)
        if packed is None:
            return None
        files.append([rel, *packed])
    return files


def _pack(path: str, signature: str) -> tuple[int, int, str] | None:
    """(mode, mtime_ns, data as zlib+base64) of a file whose signature is still `signature`."""
    try:
        with open(path, "rb") as fh:
            st = os.fstat(fh.fileno())
            data = fh.read()
    except OSError:
        return None
    if entry_signature(path) != signature or len(data) != st.st_size:
        return None
    packed = base64.b64encode(zlib.compress(data, 1)).decode()
    return stat.S_IMODE(st.st_mode), st.st_mtime_ns, packed
