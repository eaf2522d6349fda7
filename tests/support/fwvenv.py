"""The venv the testbed hosts run PyTorch (CPU) and JAX with Keras 3 from: built once per machine,
kept on disk, keyed by its requirements (cachedvenv.py).

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

from pathlib import Path

from tests.support.cachedvenv import CachedVenv

REQUIREMENTS = ("torch==2.13.0", "pytorch-lightning==2.6.6", "jax==0.10.2", "jaxlib==0.10.2",
                "keras==3.15.1")
PYTHON = (3, 11)
"""The Python the local CPU wheel of torch is built for (cp311)."""
FRAMEWORKS = CachedVenv("frameworks", "the frameworks' venv", REQUIREMENTS,
                        pip_options=("--no-compile",), build_timeout_s=1500)


def frameworks_python() -> Path:
    """The venv's python (built first where it is not there whole)."""
    return FRAMEWORKS.python()
