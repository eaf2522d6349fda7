"""Sync fallback for hosts without rsync: SFTP puts of the files whose size or mtime differ."""

from __future__ import annotations

import os
import posixpath
import stat

from tfctl.remote.connect.transport import Transport
from tfctl.remote.errors import RemoteError
from tfctl.remote.sync.result import SyncResult


def sftp_sync(t: Transport, source: str, dest: str, files: list[str]) -> SyncResult:
    sftp = t.sftp()
    if sftp is None:
        raise RemoteError(t.host.name, "rsync is missing and this transport has no SFTP",
                          kind="sync")
    changed: list[str] = []
    nbytes = 0
    made: set[str] = set()
    for rel in files:
        local = os.path.join(source, rel)
        st = os.stat(local)
        remote = posixpath.join(dest, rel.replace(os.sep, "/"))
        if _same(sftp, remote, st):
            continue
        _makedirs(sftp, posixpath.dirname(remote), made)
        sftp.put(local, remote)
        sftp.utime(remote, (st.st_atime, st.st_mtime))
        sftp.chmod(remote, stat.S_IMODE(st.st_mode))
        changed.append(rel)
        nbytes += st.st_size
    return SyncResult(t.host.name, "sftp", len(changed), nbytes, tuple(changed), dest,
                      "rsync missing on the host: copied over SFTP")


def _same(sftp: object, remote: str, st: os.stat_result) -> bool:
    try:
        rst = sftp.stat(remote)  # type: ignore[attr-defined]
    except OSError:
        return False
    return bool(rst.st_size == st.st_size and int(rst.st_mtime) == int(st.st_mtime))


def _makedirs(sftp: object, path: str, made: set[str]) -> None:
    if not path or path in made or path == "/":
        return
    try:
        sftp.stat(path)  # type: ignore[attr-defined]
    except OSError:
        _makedirs(sftp, posixpath.dirname(path), made)
        sftp.mkdir(path)  # type: ignore[attr-defined]
    made.add(path)
