"""Test doubles for programs tfctl drives on hosts. Test-only: never installed on a real host.

`nvidia_smi_standin.py` is an executable stand-in for the `nvidia-smi` CLI (see its docstring);
`install_nvidia_smi_standin(bin_dir)` puts it on a test host's PATH under the real name.
"""

from __future__ import annotations

from pathlib import Path

NVIDIA_SMI_STANDIN = Path(__file__).resolve().parent / "nvidia_smi_standin.py"


def install_nvidia_smi_standin(bin_dir: Path) -> Path:
    """Symlink `bin_dir/nvidia-smi` to the stand-in (replacing an older link); return the link."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    link = bin_dir / "nvidia-smi"
    if link.is_symlink():
        link.unlink()
    link.symlink_to(NVIDIA_SMI_STANDIN)
    return link
