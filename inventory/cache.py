"""Validated inventories, remembered: a command run again on an unchanged file skips PyYAML and
pydantic, about 100 ms of every command's start and most of `tfctl status`'s own CPU.

An entry is keyed by the file's bytes, its absolute path, the `--hostfile` given, the home
folder and the inventory code itself (each module's size and mtime), and records the digest of
the machinefile the hosts came from, checked again on every hit. Only inventories that loaded
without error are stored: a broken file is validated, and explained, every time.

Entries are pickles, so they are read only from a folder that belongs to the user and that nobody
else can write to (the check OpenSSH makes of its ControlPath); anything unexpected is a miss,
never an error. `TFCTL_INVENTORY_CACHE=0` turns the cache off.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import os
import pickle
import stat
import sys
from pathlib import Path
from typing import Any

from tfctl.inventory.model import MAX_INVENTORY_BYTES, Inventory

MAX_ENTRIES = 64
_FORMAT = b"tfctl-inventory-cache-1"


def load_inventory_cached(path: str | os.PathLike[str], hostfile: str | None = None
                          ) -> Inventory:
    """`load.load_inventory`, answered from the cache when the file and its inputs are unchanged."""
    filename = str(path)
    folder = cache_dir()
    data = _read_small(filename)
    if folder is None or data is None:
        return _load(filename, hostfile, None, None)
    key = _key(filename, data, hostfile)
    entry = folder / key
    found = _read_entry(entry)
    if found is not None:  # stored with the name it was loaded by, perhaps relative to another cwd
        return dataclasses.replace(found, path=filename)
    return _load(filename, hostfile, data, entry)


def cache_dir() -> Path | None:
    """The user's own cache folder for inventories (created 0700), or None if unusable."""
    if os.environ.get("TFCTL_INVENTORY_CACHE", "1") == "0":
        return None
    base = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
    folder = Path(base) / "tfctl" / "inventories"
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        info = folder.stat()
    except OSError:
        return None
    if info.st_uid != os.getuid() or info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return None
    return folder


def _load(filename: str, hostfile: str | None, data: bytes | None,
          entry: Path | None) -> Inventory:
    from tfctl.inventory.load import load_inventory

    inv = load_inventory(filename, hostfile=hostfile)
    if entry is not None and data is not None and _read_small(filename) == data:
        _write_entry(entry, inv)  # unless the file changed while it was being read
    return inv


def _read_small(filename: str) -> bytes | None:
    try:
        with open(filename, "rb") as fh:
            if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
                return None
            data = fh.read(MAX_INVENTORY_BYTES + 1)
    except OSError:
        return None
    return data if len(data) <= MAX_INVENTORY_BYTES else None


def _key(filename: str, data: bytes, hostfile: str | None) -> str:
    digest = hashlib.sha256(_FORMAT)
    for part in (os.path.abspath(filename), hostfile or "", os.path.expanduser("~"),
                 _code_fingerprint()):
        digest.update(part.encode(errors="surrogateescape") + b"\0")
    digest.update(data)
    return digest.hexdigest()[:40]


def _code_fingerprint() -> str:
    """The inventory code (its subpackages' too: the frameworks resolve keys in the loader) and
    Python that produced an entry: a change to either is a miss."""
    here = Path(__file__).parent
    parts = [sys.version]
    for module in sorted(here.rglob("*.py")):
        info = module.stat()
        parts.append(f"{module.relative_to(here)}:{info.st_size}:{info.st_mtime_ns}")
    return ";".join(parts)


def _file_digest(path: str | None) -> str | None:
    if path is None:
        return None
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except OSError:
        return None


def _read_entry(entry: Path) -> Inventory | None:
    try:
        with open(entry, "rb") as fh:
            info = os.fstat(fh.fileno())
            if info.st_uid != os.getuid() or info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
                return None
            record: Any = pickle.load(fh)
    except (OSError, pickle.PickleError, EOFError, AttributeError, ImportError, TypeError,
            ValueError, IndexError):
        return None
    if not isinstance(record, dict) or not isinstance(record.get("inventory"), Inventory):
        return None
    inv: Inventory = record["inventory"]
    if inv.hostfile is not None and _file_digest(inv.hostfile) != record.get("hostfile_sha256"):
        return None
    with contextlib.suppress(OSError):
        os.utime(entry)  # recently used: kept when old entries are pruned
    return inv


def _write_entry(entry: Path, inv: Inventory) -> None:
    record = {"inventory": inv, "hostfile_sha256": _file_digest(inv.hostfile)}
    if inv.hostfile is not None and record["hostfile_sha256"] is None:
        return
    tmp = entry.with_name(f".{entry.name}.{os.getpid()}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as fh:
            pickle.dump(record, fh, protocol=pickle.HIGHEST_PROTOCOL)
        os.replace(tmp, entry)
        _prune(entry.parent)
    except OSError:
        with contextlib.suppress(OSError):
            os.remove(tmp)


def _prune(folder: Path) -> None:
    """Keep the `MAX_ENTRIES` most recently used entries."""
    try:
        entries = sorted(folder.iterdir(), key=lambda p: p.stat().st_mtime_ns, reverse=True)
    except OSError:
        return
    for old in entries[MAX_ENTRIES:]:
        with contextlib.suppress(OSError):
            old.unlink()
