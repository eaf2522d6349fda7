"""The venv the testbed hosts run Jupyter from (`tfctl notebook`), cached as the frameworks' venv
is (cachedvenv.py).

JupyterLab and ipykernel, what a lab installs for notebooks: about 175 to 244 MB, 30 s to a few
minutes on a loaded 2-core machine. The hosts are namespaces of this machine, so its python is
every host's `python:` in the notebook tests.
"""

from __future__ import annotations

from pathlib import Path

from tests.support.cachedvenv import CachedVenv

REQUIREMENTS = ("jupyterlab", "ipykernel")
JUPYTER = CachedVenv("jupyter", "the Jupyter venv", REQUIREMENTS)


def jupyter_python() -> Path:
    """The venv's python (built first where it is not there whole)."""
    return JUPYTER.python()
