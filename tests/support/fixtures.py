"""Pytest fixtures the tests share beyond the testbed; loaded with
`pytest_plugins = ["tests.support.fixtures"]` (tests/conftest.py).

- `agent_dir`: a workdir for the host agent run for real (tests/support/agentdriver.py), every run
  it started stopped afterwards.
- `small_fs`: a tmpfs of 8 MiB, a filesystem that really fills up (root only).
- `held`: the environment of commands that keep their connections (tests/support/holders.py).
- `frameworks_python`: the python of a venv with PyTorch (CPU), JAX and Keras 3, built once per
  machine and cached on disk (tests/support/fwvenv.py), what the testbed hosts run them with.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import fwvenv
from tests.support.agentdriver import AgentDir
from tests.support.holders import holders
from tests.support.testbedtools import wait_until


@pytest.fixture
def agent_dir(tmp_path: Path) -> Iterator[AgentDir]:
    with AgentDir(tmp_path) as the_dir:
        yield the_dir


@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Path]:
    """An 8 MiB tmpfs: a filesystem that really fills up."""
    if os.geteuid() != 0:
        pytest.skip("needs root to mount a tmpfs")
    mount = tmp_path / "fs"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(mount)], check=True)
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=True)


@pytest.fixture
def held() -> Iterator[dict[str, str]]:
    """The environment of commands that keep their connections 30 s, with a socket folder of
    their own; whatever holder they started is ended afterwards."""
    if os.environ.get("TFCTL_PERSIST", "0") != "0":  # the suite keeps connections too
        # (TFCTL_TEST_PERSIST): its holder's agents on the testbed hosts would count as the test's
        subprocess.run([sys.executable, "-m", "tfctl.tui", "disconnect"], check=True,
                       capture_output=True, timeout=60)
    runtime = Path(tempfile.mkdtemp(prefix="tfh-", dir="/tmp"))  # short: a socket path ≤ 107
    yield {"TFCTL_PERSIST": "30", "XDG_RUNTIME_DIR": str(runtime)}
    for pid in holders(runtime):
        os.kill(pid, signal.SIGTERM)
    wait_until("holder gone after SIGTERM", lambda: not holders(runtime), 10, every_s=0.05)
    shutil.rmtree(runtime, ignore_errors=True)


@pytest.fixture(scope="session")
def frameworks_python() -> Path:
    """The frameworks' venv's python (built on first use: minutes, once per machine)."""
    if sys.version_info[:2] != fwvenv.PYTHON:
        pytest.skip(f"the frameworks' venv is pinned for Python {'.'.join(map(str, fwvenv.PYTHON))}"
                    " (torch's CPU wheel): another would take the CUDA build")
    return fwvenv.frameworks_python()
