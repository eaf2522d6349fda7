"""The venv the testbed hosts run Jupyter from (`tfctl notebook`): built once per machine, kept on
disk, keyed by its requirements, as the frameworks' venv is (tests/support/fwvenv.py: the same
cache folder, lock and marker).

JupyterLab and ipykernel, what a lab installs for notebooks; measured here: about 244 MB, about
30 s from the machine's local wheels. The hosts are namespaces of this machine, so its python is
every host's `python:` in the notebook tests.
"""

from __future__ import annotations

import fcntl
import hashlib
import subprocess
import sys
import time
from pathlib import Path

from tests.support.fwvenv import cache_root

REQUIREMENTS = ("jupyterlab", "ipykernel")
BUILD_TIMEOUT_S = 900


def venv_path() -> Path:
    key = hashlib.sha256("\n".join((sys.version, *REQUIREMENTS)).encode()).hexdigest()[:12]
    return cache_root() / f"jupyter-{key}"


def jupyter_python() -> Path:
    """The venv's python (built first where it is not there whole)."""
    venv = venv_path()
    marker = venv / "tfctl-test-complete"
    if marker.exists():
        return venv / "bin" / "python"
    venv.parent.mkdir(parents=True, exist_ok=True)
    with open(venv.parent / f"{venv.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another session may be building it: wait for it
        if not marker.exists():
            _build(venv)
            marker.write_text("\n".join(REQUIREMENTS) + "\n")
    return venv / "bin" / "python"


def _build(venv: Path) -> None:
    import shutil

    shutil.rmtree(venv, ignore_errors=True)
    started = time.monotonic()
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    run = subprocess.run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"),
                          "install", "--quiet", "--disable-pip-version-check", *REQUIREMENTS],
                         capture_output=True, text=True, timeout=BUILD_TIMEOUT_S)
    if run.returncode != 0:
        raise RuntimeError(f"pip could not build the Jupyter venv {venv}:\n{run.stderr}")
    size = sum(f.stat().st_size for f in venv.rglob("*") if f.is_file() and not f.is_symlink())
    print(f"\nJupyter venv {venv}: built in {time.monotonic() - started:.0f} s, "
          f"{size / 2**20:.0f} MiB", file=sys.stderr)
