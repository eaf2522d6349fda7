"""Test doubles for programs tfctl drives on hosts. Test-only: never installed on a real host.

`nvidia_smi_standin.py` is an executable stand-in for the `nvidia-smi` CLI (see its docstring);
`install_nvidia_smi_standin(bin_dir)` puts it on a test host's PATH under the real name;
`standin_first_on_path` makes it this test process's `nvidia-smi`, and `make_standin_fail` makes
that one fail in one of the ways a real one does.
"""

from __future__ import annotations

import sys
import uuid
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pytest

NVIDIA_SMI_STANDIN = Path(__file__).resolve().parent / "nvidia_smi_standin.py"
NVML_MISMATCH = "Failed to initialize NVML: Driver/library version mismatch"
"""What nvidia-smi says where the driver and its library differ (a driver updated, no reboot)."""
STANDIN_FAILURES = {
    "nvml": {"TFCTL_TEST_NVSMI_FAIL": NVML_MISMATCH},
    "no_gpus": {"TFCTL_TEST_NVSMI_GPUS": "0"},
    "hangs": {"TFCTL_TEST_NVSMI_HANG": "1"},
    "not_on_path": {"PATH": "/usr/bin:/bin"},
}
"""The ways this test's stand-in fails, by name: the environment that makes it fail so."""


def standin_first_on_path(bin_dir: Path, gpus: int, monkeypatch: pytest.MonkeyPatch) -> Path:
    """This test's `nvidia-smi` (PATH: `bin_dir`, /usr/bin, /bin): the stand-in with `gpus`
    GPUs, seeing only the processes tagged for this test, none of the stand-in's other
    settings inherited. Returns `bin_dir`."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    tool = bin_dir / "nvidia-smi"
    tool.write_text(f"#!/bin/sh\nexec {sys.executable} {NVIDIA_SMI_STANDIN} \"$@\"\n")
    tool.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    monkeypatch.setenv("TFCTL_TEST_NVSMI_GPUS", str(gpus))
    monkeypatch.setenv("TFCTL_TEST_NVSMI_TAG", uuid.uuid4().hex)
    for name in ("TFCTL_TEST_NVSMI_DRIVER", "TFCTL_TEST_NVSMI_FAIL", "TFCTL_TEST_NVSMI_HANG",
                 "TFCTL_TEST_NVSMI_CONFIG"):
        monkeypatch.delenv(name, raising=False)
    return bin_dir


def install_nvidia_smi_standin(bin_dir: Path) -> Path:
    """Symlink `bin_dir/nvidia-smi` to the stand-in (replacing an older link); return the link."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    link = bin_dir / "nvidia-smi"
    if link.is_symlink():
        link.unlink()
    link.symlink_to(NVIDIA_SMI_STANDIN)
    return link


def make_standin_fail(how: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """This test's `nvidia-smi` (`standin_first_on_path`) fails `how` (STANDIN_FAILURES)."""
    for name, value in STANDIN_FAILURES[how].items():
        monkeypatch.setenv(name, value)
