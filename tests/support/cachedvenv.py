"""A venv the testbed hosts run a framework or a tool from, built once per machine and kept on
disk, keyed by its requirements and this Python's version (fwvenv.py: PyTorch and JAX;
jupytervenv.py: Jupyter).

It lives in `$TFCTL_TEST_CACHE` (default `~/.cache/tfctl-tests`) as `<name>-<key>`: a later
session, or a CI run on a clean clone of the same machine, reuses it; a change of requirement
builds another. The build takes a lock (two sessions build it once) and writes its marker last
(a build cut short is started again, never used half-made). The hosts are namespaces of this
machine and see its filesystem, so one venv here is every host's `python:`.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

MARKER = "tfctl-test-complete"


def cache_root() -> Path:
    return Path(os.environ.get("TFCTL_TEST_CACHE") or Path.home() / ".cache" / "tfctl-tests")


@dataclass(frozen=True)
class CachedVenv:
    """One cached venv: its folder's name, how it is called in messages, what pip installs."""

    name: str
    words: str
    requirements: tuple[str, ...]
    pip_options: tuple[str, ...] = ()
    build_timeout_s: float = 900.0

    def path(self) -> Path:
        key = hashlib.sha256("\n".join((sys.version, *self.requirements)).encode())
        return cache_root() / f"{self.name}-{key.hexdigest()[:12]}"

    def python(self) -> Path:
        """The venv's python (built first where it is not there whole)."""
        venv = self.path()
        marker = venv / MARKER
        if marker.exists():
            return venv / "bin" / "python"
        venv.parent.mkdir(parents=True, exist_ok=True)
        with open(venv.parent / f"{venv.name}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # another session may be building it: wait for it
            if not marker.exists():
                self._build(venv)
                marker.write_text("\n".join(self.requirements) + "\n")
        return venv / "bin" / "python"

    def _build(self, venv: Path) -> None:
        shutil.rmtree(venv, ignore_errors=True)
        started = time.monotonic()
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
        run = subprocess.run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"),
                              "install", "--quiet", *self.pip_options,
                              "--disable-pip-version-check", *self.requirements],
                             capture_output=True, text=True, timeout=self.build_timeout_s)
        if run.returncode != 0:
            raise RuntimeError(f"pip could not build {self.words} {venv}:\n{run.stderr}")
        size = sum(f.stat().st_size for f in venv.rglob("*") if f.is_file() and not f.is_symlink())
        print(f"\n{self.words} {venv}: built in {time.monotonic() - started:.0f} s, "
              f"{size / 2**20:.0f} MiB", file=sys.stderr)
