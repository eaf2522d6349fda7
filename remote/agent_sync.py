"""The agent's sync check: which of the source's paths differ on this host.

Part of the agent program (see `agent.py`): stdlib only, Python >= 3.8, Linux, no tfctl imports.
rsync's quick check (type, size, whole-second mtime, mode; a link's target) is computed alike on
the client's source (sync.py imports `entry_signature` from here, which is why this file imports
nothing of the agent's) and on the host's copy, so that an unchanged tree costs one round trip
and a changed one is rsynced for just those paths.
"""

from __future__ import annotations

import os
from typing import Any

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
    import base64
    import json
    import shutil
    import zlib

    os.makedirs(workdir, exist_ok=True)
    entries = json.loads(zlib.decompress(base64.b64decode(packed_entries)))
    differ = [rel for rel, sig in entries if entry_signature(os.path.join(workdir, rel)) != sig]
    many = len(differ) > SYNC_DIFF_MAX
    return {"dest": workdir, "rsync": shutil.which("rsync"), "count": len(differ),
            "differ": None if many else differ}
