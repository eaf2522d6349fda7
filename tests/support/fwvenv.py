"""The venv the testbed hosts run PyTorch (CPU) and JAX with Keras 3 from: built once per machine,
kept on disk, keyed by its requirements.

The testbed's hosts are namespaces of this machine and see its filesystem, so one venv here is
every host's `python:`. It lives in `$TFCTL_TEST_CACHE` (default `~/.cache/tfctl-tests`) as
`frameworks-<key>`, the key a hash of the requirements and this Python's version: a later session,
a CI run on a clean clone of the same machine, reuses it; a change of requirement builds another.
The build takes a lock (two sessions build it once) and writes its marker last (a build cut short
is started again, never used half-made).

PyTorch is pinned exactly: `torch==2.13.0` takes the CPU wheel this machine's pip finds among its
local wheels (`2.13.0+cpu` sorts above the registry's `2.13.0`), where any other spec takes the
default Linux wheel, which pulls the CUDA libraries (several GB). PyTorch Lightning (the
`pytorch-lightning` package, Lightning's trainer alone) asks only `torch>=2.1.0`, which the pinned
wheel meets, so it pulls no other torch. `--no-compile`: pip would
compile every module of torch and jaxlib (thousands) at install; the tests compile the few they
import. Measured here: about 1.3 GB, 1 to 4 minutes (README: Tests).
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

REQUIREMENTS = ("torch==2.13.0", "pytorch-lightning==2.6.6", "jax==0.10.2", "jaxlib==0.10.2",
                "keras==3.15.1")
PYTHON = (3, 11)
"""The Python the local CPU wheel of torch is built for (cp311)."""
BUILD_TIMEOUT_S = 1500


def cache_root() -> Path:
    return Path(os.environ.get("TFCTL_TEST_CACHE") or Path.home() / ".cache" / "tfctl-tests")


def venv_path() -> Path:
    key = hashlib.sha256("\n".join((sys.version, *REQUIREMENTS)).encode()).hexdigest()[:12]
    return cache_root() / f"frameworks-{key}"


def frameworks_python() -> Path:
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
    shutil.rmtree(venv, ignore_errors=True)
    started = time.monotonic()
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    run = subprocess.run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"),
                          "install", "--quiet", "--no-compile", "--disable-pip-version-check",
                          *REQUIREMENTS], capture_output=True, text=True,
                         timeout=BUILD_TIMEOUT_S)
    if run.returncode != 0:
        raise RuntimeError(f"pip could not build the frameworks' venv {venv}:\n{run.stderr}")
    size = sum(f.stat().st_size for f in venv.rglob("*") if f.is_file() and not f.is_symlink())
    print(f"\nframeworks' venv {venv}: built in {time.monotonic() - started:.0f} s, "
          f"{size / 2**20:.0f} MiB", file=sys.stderr)
