"""What `tfctl reserve` and `release` are given: `HOST:GPUS` and durations like `3d`; pure.

`titan:2,3` and `titan:2-3` name GPUs 2 and 3 of host titan (nvidia-smi indices, what masks
mean); a duration is one or more `<number><unit>` with unit s, m, h, d or w (`3d`, `1d12h`,
`90m`). Each mistake is one sentence, a ValueError.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

_PART = re.compile(r"(\d+(?:\.\d+)?)([smhdw])")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_duration(text: str) -> float:
    """`3d` → 259200.0 seconds; `1d12h`, `90m`, `45s`, `2w`."""
    given = text.strip().lower()
    parts = _PART.findall(given)
    if not given or "".join(n + u for n, u in parts) != given:
        raise ValueError(f"cannot read the duration {text!r}: write it like 3d, 12h, 90m or "
                         "1d12h")
    seconds = sum(float(n) * _UNIT_S[u] for n, u in parts)
    if seconds <= 0:
        raise ValueError(f"the duration {text!r} is not longer than nothing")
    return seconds


def _gpus(host: str, text: str) -> list[int]:
    out: list[int] = []
    for item in text.split(","):
        first, dash, last = item.strip().partition("-")
        if not first.isdigit() or (dash and not last.isdigit()):
            raise ValueError(f"{host}:{text}: GPUs are nvidia-smi indices like 2,3 or 0-3")
        for index in range(int(first), int(last or first) + 1):
            if index not in out:
                out.append(index)
    return out


def parse_targets(targets: Iterable[str], hosts: Sequence[str]) -> dict[str, list[int]]:
    """`["titan:2,3", "gtx970:0"]` → {"titan": [2, 3], "gtx970": [0]}, hosts of the inventory."""
    found: dict[str, list[int]] = {}
    for target in targets:
        host, colon, gpus = target.partition(":")
        if not colon or not gpus:
            raise ValueError(f"{target!r}: name the GPUs too, as HOST:GPUS (e.g. {host}:0,1)")
        if host not in hosts:
            raise ValueError(f"{target!r}: no host {host!r} in the inventory (hosts: "
                             f"{', '.join(hosts)})")
        found.setdefault(host, [])
        found[host] += [g for g in _gpus(host, gpus) if g not in found[host]]
    if not found:
        raise ValueError("name at least one HOST:GPUS")
    return found
