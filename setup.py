"""What the wheel holds, found from the tree; everything else is in pyproject.toml.

tfctl is assembled from top-level folders (docs/architecture.md): each is mapped to a
subpackage of the `tfctl` namespace, so nothing named `inventory`, `remote` or `tui` lands at
the top of site-packages. setuptools' own discovery (`[tool.setuptools.packages.find]`) names
the packages it finds after the folder it searched, with no prefix, so here each folder is
searched by itself (`find_packages`) and its packages are named under its mapping. A package's
data is every other file in its folder (the agent's shell scripts, the dashboard's stylesheet,
the examples' inventories and README): a new module, subpackage or file needs no list.
"""

from __future__ import annotations

import os

from setuptools import find_packages, setup

PACKAGE_DIR = {
    "tfctl.inventory": "inventory",
    "tfctl.remote": "remote",
    "tfctl.tui": "tui",
    "tfctl.examples": "examples",
}
"""Package → its folder; subpackages follow their folders."""

HERE = os.path.dirname(os.path.abspath(__file__))


def packages() -> list[str]:
    """Every package under the mapped folders (a folder with an `__init__.py`)."""
    found = []
    for name, folder in PACKAGE_DIR.items():
        found.append(name)
        found += [f"{name}.{sub}" for sub in find_packages(where=os.path.join(HERE, folder))]
    return found


def _is_data(file_name: str) -> bool:
    """A file shipped beside the modules: not a module, not bytecode, not hidden or a backup."""
    return not (file_name.endswith((".py", ".pyc", ".pyo", "~"))
                or file_name.startswith("."))


def package_data(names: list[str]) -> dict[str, list[str]]:
    """Package → the data files in its own folder (subfolders are packages of their own)."""
    data = {}
    for name in names:
        top = ".".join(name.split(".")[:2])
        folder = os.path.join(HERE, PACKAGE_DIR[top], *name.split(".")[2:])
        files = sorted(f for f in os.listdir(folder)
                       if _is_data(f) and os.path.isfile(os.path.join(folder, f)))
        if files:
            data[name] = files
    return data


PACKAGES = packages()
setup(package_dir=PACKAGE_DIR, packages=PACKAGES, package_data=package_data(PACKAGES))
