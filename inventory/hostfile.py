"""Host lists people already have: OpenMPI machinefiles, DeepSpeed hostfiles, horovodrun's -H.

Accepted, one format per file:
- machinefile / hostfile lines: `host`, `host slots=4`, `host slots=4 max_slots=4`, `# comments`;
- horovodrun style: `host1:4,host2:2` (commas or newlines between entries).
`slots` becomes the host's GPU count (one worker per slot with `workers: per_gpu`); a bare host
gets 0 GPUs (CPU only). Host names become both `name` and `address`.
"""

from __future__ import annotations

import re
from typing import Any

from tfctl.inventory.errors import InventoryError

_SLOTS = re.compile(r"^slots=(\d+)$")
_MAX_SLOTS = re.compile(r"^max_slots=(\d+)$")
_COLON = re.compile(r"^([^:\s,]+):(\d+)$")


def read_hostfile(path: str) -> list[dict[str, Any]]:
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except OSError as exc:
        raise InventoryError(path, None, "hostfile", f"cannot be read ({exc.strerror})",
                             "pass an existing machinefile or `host1:4,host2:2` file") from None
    return parse_hostfile(text, path)


def parse_hostfile(text: str, path: str = "hostfile") -> list[dict[str, Any]]:
    hosts: list[dict[str, Any]] = []
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        entries = [e.strip() for e in line.split(",")] if "," in line or _COLON.match(line) \
            else [line]
        for entry in entries:
            if entry:
                hosts.append(_entry(entry, path, lineno))
    names = [h["name"] for h in hosts]
    for i, name in enumerate(names):
        if name in names[:i]:
            raise InventoryError(path, None, "hostfile", f"host {name!r} is listed twice",
                                 "list each host once with its slot count")
    return hosts


def _entry(entry: str, path: str, lineno: int) -> dict[str, Any]:
    colon = _COLON.match(entry)
    if colon:
        return {"name": _name(colon.group(1), path, lineno), "gpus": int(colon.group(2))}
    parts = entry.split()
    host: dict[str, Any] = {"name": _name(parts[0], path, lineno), "gpus": 0}
    for part in parts[1:]:
        slots = _SLOTS.match(part)
        if slots:
            host["gpus"] = int(slots.group(1))
        elif not _MAX_SLOTS.match(part):
            raise InventoryError(path, lineno, "hostfile", f"cannot read {part!r}",
                                 "write `host slots=N` (machinefile) or `host:N` (horovodrun)")
    return host


def _name(name: str, path: str, lineno: int) -> str:
    if not re.match(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$", name):
        raise InventoryError(path, lineno, "hostfile", f"{name!r} is not a host name",
                             "use a DNS name, an IP address or an ~/.ssh/config alias")
    return name
