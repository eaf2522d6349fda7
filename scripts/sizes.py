"""Print the largest modules and the fullest folders of the three floors.

A size is a reason to look at a module, never a rule that decides where code goes: this report
is printed by `scripts/lint` and fails nothing. Usage: python scripts/sizes.py [--top N]
"""

from __future__ import annotations

import argparse
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FLOORS = ("inventory", "remote", "tui")


def module_lines() -> dict[Path, int]:
    """Every module of the three floors and its line count."""
    return {
        path.relative_to(ROOT): len(path.read_text().splitlines())
        for floor in FLOORS
        for path in sorted((ROOT / floor).rglob("*.py"))
    }


def folder_modules(lines: dict[Path, int]) -> Counter[Path]:
    """How many modules (not counting `__init__.py`) each folder holds."""
    return Counter(path.parent for path in lines if path.name != "__init__.py")


def report(top: int) -> str:
    lines = module_lines()
    largest = sorted(lines.items(), key=lambda item: (-item[1], str(item[0])))[:top]
    fullest = folder_modules(lines).most_common(top)
    out = [f"sizes: the {top} largest of {len(lines)} modules, {sum(lines.values())} lines in all"]
    out += [f"  {n:5d} lines  {path}" for path, n in largest]
    out.append(f"sizes: the {top} fullest folders")
    out += [f"  {n:5d} modules  {folder}/" for folder, n in fullest]
    return "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--top", type=int, default=5)
    print(report(parser.parse_args().top))


if __name__ == "__main__":
    main()
