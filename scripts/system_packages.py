#!/usr/bin/env python3
"""The system programs the tests need: read from `scripts/system-packages.txt`, found or missing.

One reader for the list, used by `scripts/test` (which installs what is missing) and by
`tests/install/test_system_packages.py` (which checks that every program the code runs is on the
list). Standard library only: it runs before the project's venv exists.

    python3 scripts/system_packages.py missing   # one line on stderr, missing packages on stdout
"""

from __future__ import annotations

import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

LIST = Path(__file__).with_name("system-packages.txt")
# Programs in sbin are not on a normal user's PATH on Debian, but root's lab runs them.
SEARCH_PATH = os.pathsep.join(
    [os.environ.get("PATH", ""), "/usr/local/sbin", "/usr/sbin", "/sbin"]
)


@dataclass(frozen=True)
class Package:
    """One line of the list: a Debian package, the programs we run from it, and who needs them."""

    name: str
    programs: tuple[str, ...]
    needed_by: str


def read_list(path: Path = LIST) -> list[Package]:
    packages = []
    for raw in path.read_text().splitlines():
        line, _, note = raw.partition("#")
        words = line.split()
        if words:
            packages.append(Package(words[0], tuple(words[1:]), note.strip()))
    return packages


def missing(packages: list[Package]) -> list[tuple[Package, list[str]]]:
    """Each package with at least one program not found, and those programs."""
    gaps = []
    for package in packages:
        absent = [p for p in package.programs if shutil.which(p, path=SEARCH_PATH) is None]
        if absent:
            gaps.append((package, absent))
    return gaps


def report(gaps: list[tuple[Package, list[str]]], *, can_install: bool) -> str:
    """One line for a person: what is missing and what happens about it."""
    if not gaps:
        return "system programs: all present"
    programs = " ".join(p for _, absent in gaps for p in absent)
    names = " ".join(package.name for package, _ in gaps)
    if can_install:
        return f"system programs missing: {programs}; installing {names}"
    skipped = "; ".join(f"{package.needed_by} ({' '.join(absent)})" for package, absent in gaps)
    return (f"system programs missing: {programs} (neither root nor sudo: install {names} "
            f"yourself); skipped or failing without them: {skipped}")


def main(argv: list[str]) -> int:
    if argv[1:] != ["missing"]:
        print(__doc__, file=sys.stderr)
        return 2
    gaps = missing(read_list())
    # scripts/test runs apt-get as root, or through sudo for a user
    can_install = shutil.which("apt-get") is not None and (
        os.geteuid() == 0 or shutil.which("sudo") is not None)
    print(report(gaps, can_install=can_install), file=sys.stderr)
    print(" ".join(package.name for package, _ in gaps))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
