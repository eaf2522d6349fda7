"""A real cluster of `transport: local` hosts in a temporary folder (no SSH, no lab): each host its
own workdir on this machine, the light job (tests/support/lightjob.py) as job.py, free ports. For
the command-line tests of `--json`, colour, live progress and `--only/--exclude`."""

from __future__ import annotations

import os
import random
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from tfctl.tui.cli.demo_lab import free_port_block

HERE = Path(__file__).parent


def local_cluster(tmp: Path, hosts: dict[str, dict[str, Any]], job: dict[str, Any] | None = None
                  ) -> Path:
    """`tmp/src/cluster.yaml` naming `hosts` (name → extra keys) on this machine; its path.

    Ports are a free block, so tests running at once (or a leftover) do not collide; every host
    uses the same ports, so only one host may have a worker where two are launched together.
    """
    src = tmp / "src"
    src.mkdir(parents=True, exist_ok=True)
    shutil.copy(HERE / "lightjob.py", src / "job.py")
    base = free_port_block(3, start=random.randrange(30000, 38000, 3))
    data = {
        "name": "loc",
        "defaults": {"python": sys.executable},
        "hosts": [{"name": name, "address": "127.0.0.1", "transport": "local",
                   "workdir": str(tmp / f"work-{name}"), **extra}
                  for name, extra in hosts.items()],
        "job": {"script": "job.py", "style": "flags", "args": ["--forever"],
                "ports": {"ps": base, "worker": base + 1, "chief": base + 2}, **(job or {})},
    }
    inv = src / "cluster.yaml"
    inv.write_text(yaml.safe_dump(data, sort_keys=False))
    return inv


def run_tfctl(inv: Path, *args: str, env: dict[str, str] | None = None,
              timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """The real command line, in a new process with no terminal (the plain mode)."""
    return subprocess.run([sys.executable, "-m", "tfctl.tui", "-i", str(inv), *args],
                          capture_output=True, text=True, timeout=timeout, cwd=inv.parent,
                          env={**os.environ, **(env or {})})
