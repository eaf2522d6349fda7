"""The agent's sync check: which of the source's paths differ on this host.

Part of the agent program (`__init__.py`): stdlib only, Python >= 3.8, Linux, no tfctl imports.
rsync's quick check (type, size, whole-second mtime, mode; a link's target) is computed alike on
the client's source (remote/sync/put.py and rsync.py import `entry_signature` from here, which
is why this file imports nothing of the agent's but wire.py's JSON reader and `which`) and on
the host's copy, so that an unchanged tree costs one round trip and a changed one is rsynced
for just those paths.
"""

from __future__ import annotations

import os
from typing import Any

from tfctl.remote.agent.wire import json_loads, which

SYNC_DIFF_MAX = 2000  # more differing paths than this: the answer says "many", rsync them all


def entry_signature(path: str) -> str | None:
    """What rsync -a's quick check compares for one path, or None if it is missing. Computed
    alike on the client's source and on the host's copy."""
    import stat

    try:
        st = os.lstat(path)
        if stat.S_ISLNK(st.st_mode):
            return "l:" + os.readlink(path)
    except OSError:
        return None
    if stat.S_ISDIR(st.st_mode):
        return f"d:{st.st_mode & 0o7777:o}"
    return f"f:{st.st_size}:{int(st.st_mtime)}:{st.st_mode & 0o7777:o}"


def sync_diff(workdir: str, packed_entries: str) -> dict[str, Any]:
    """Create `workdir`; which of `packed_entries` ([path, signature] as JSON, zlib, base64)
    differ in it (None when more than SYNC_DIFF_MAX do), and whether rsync is here."""
    import binascii  # base64's own decoder: the base64 module imports re
    import zlib

    os.makedirs(workdir, exist_ok=True)
    entries = json_loads(zlib.decompress(binascii.a2b_base64(packed_entries)).decode())
    differ = [rel for rel, sig in entries if entry_signature(os.path.join(workdir, rel)) != sig]
    many = len(differ) > SYNC_DIFF_MAX
    return {"dest": workdir, "rsync": which("rsync"), "count": len(differ),
            "differ": None if many else differ}


def put_files(workdir: str, files: list[list[Any]]) -> dict[str, Any]:
    """Write small changed files sent in the request: [path, mode, mtime_ns, data (zlib,
    base64)] each, as rsync -a would leave them (content, permissions, mtime; owner as a
    non-root login gets), each atomically (temporary file, then rename).

    Only inside `workdir`, only into folders that exist as real folders (no symlink on the way),
    never through a symlink: a path that does not qualify stops the work and is named in
    `refused`, and the client sends it and the rest with rsync.
    """
    import base64
    import contextlib
    import zlib

    root = os.path.realpath(workdir)
    written: list[str] = []
    total = 0
    for rel, mode, mtime_ns, packed in files:
        path = os.path.join(root, rel)
        parent = os.path.dirname(path)
        if os.path.isabs(rel) or ".." in rel.split("/") or os.path.realpath(parent) != parent \
                or not (parent + "/").startswith(root + "/") or not os.path.isdir(parent) \
                or os.path.islink(path) or os.path.isdir(path):
            return {"written": written, "bytes": total, "refused": rel}
        data = zlib.decompress(base64.b64decode(packed))
        tmp = os.path.join(parent, f".{os.path.basename(path)}.tfctl-{os.getpid()}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        try:
            with os.fdopen(fd, "wb") as out:
                out.write(data)
                os.fchmod(out.fileno(), int(mode))
            os.utime(tmp, ns=(int(mtime_ns), int(mtime_ns)))
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.remove(tmp)
            raise
        written.append(rel)
        total += len(data)
    return {"written": written, "bytes": total, "refused": None}
