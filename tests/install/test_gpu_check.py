"""scripts/gpu-check on a machine without an NVIDIA GPU: one sentence saying so, exit 0.

(On a machine with one it checks tfctl against the real driver: docs/gpu-check.md.)"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "gpu-check"


def test_without_nvidia_smi_it_says_so_and_exits_0(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"  # a PATH with Python and no nvidia-smi, whatever this machine has
    bin_dir.mkdir()
    (bin_dir / "python3").symlink_to(sys.executable)
    proc = subprocess.run([str(SCRIPT)], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PATH": str(bin_dir)})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == ("gpu-check: no NVIDIA GPU here (nvidia-smi is not on PATH): "
                           "nothing to check\n")
    assert proc.stderr == ""


def test_help_has_an_example() -> None:
    proc = subprocess.run([sys.executable, str(SCRIPT), "--help"], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0 and "example: scripts/gpu-check --gpu 0 --mib 512" in proc.stdout
