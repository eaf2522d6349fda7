"""What one host's sync did: shared by the rsync path (`rsync.py`) and the SFTP fallback
(`sftp.py`), so neither imports the other for it."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SyncResult:
    host: str
    method: str  # "rsync" | "agent" (small change) | "sftp" | "skipped" | "unchanged"
    files_transferred: int
    bytes_transferred: int
    changed: tuple[str, ...]
    dest: str
    note: str = ""
