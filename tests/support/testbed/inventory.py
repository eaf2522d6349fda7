"""The lab as a tfctl inventory (the `cluster.yaml` mapping), built from plain data.

Pure, so the shape can be read in one place: `name`, `defaults` (SSH settings every lab host
shares), `hosts` (address, GPUs, ps count, workdir), `job` (passed through untouched).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml


@dataclass(frozen=True)
class InventoryHost:
    name: str
    address: str
    port: int
    workdir: Path


def build_inventory(
    hosts: Sequence[InventoryHost],
    job: Mapping[str, Any],
    *,
    name: str,
    defaults: Mapping[str, Any],
    gpus: Mapping[str, int | Sequence[int]] | None = None,
    ps: Mapping[str, int] | None = None,
    host_fields: Mapping[str, Mapping[str, Any]] | None = None,
) -> dict[str, Any]:
    """Inventory mapping; a host's port is written only where it differs from defaults.port."""
    gpus = gpus or {}
    ps = ps or {}
    host_fields = host_fields or {}
    known = {host.name for host in hosts}
    unknown = (set(gpus) | set(ps) | set(host_fields)) - known
    if unknown:
        raise KeyError(f"not lab hosts: {sorted(unknown)} (hosts: {sorted(known)})")
    entries: list[dict[str, Any]] = []
    for host in hosts:
        count = gpus.get(host.name, 0)
        entry: dict[str, Any] = {
            "name": host.name,
            "address": host.address,
            "gpus": count if isinstance(count, int) else list(count),
            "ps": ps.get(host.name, 1),
            "workdir": str(host.workdir),
        }
        if host.port != defaults.get("port"):
            entry["port"] = host.port
        entry.update(host_fields.get(host.name, {}))
        entries.append(entry)
    return {"name": name, "defaults": dict(defaults), "hosts": entries, "job": dict(job)}


def dump_inventory(inventory: Mapping[str, Any], path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(dict(inventory), sort_keys=False, default_flow_style=False))
    return path
