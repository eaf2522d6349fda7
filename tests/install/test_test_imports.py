"""A test module imports what it shares with other tests only from tests/support (its fixtures
come from conftest's plugins): no module under tests/ imports another test module, so moving or
deleting a test never breaks a second one, and a helper has one place to be found in."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]
TESTS = ROOT / "tests"


def module_of(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imported_modules(text: str, package: str) -> list[tuple[int, str]]:
    """(line, module) for every module an import anywhere in `text` (a module of `package`)
    names, relative imports resolved; `from X import Y` counts as `X.Y` too, where Y could be a
    module."""
    parts = package.split(".")
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = parts[:len(parts) - node.level + 1] if node.level else []
            module = ".".join([*base, *([node.module] if node.module else [])])
            found.append((node.lineno, module))
            found.extend((node.lineno, f"{module}.{alias.name}") for alias in node.names)
    return found


def package_of(path: Path) -> str:
    module = module_of(path)
    return module if path.name == "__init__.py" else module.rsplit(".", 1)[0]


def is_test_module(module: str) -> bool:
    """A module of the suite that is not tests/support (nor a package's __init__)."""
    parts = module.split(".")
    return parts[0] == "tests" and len(parts) > 1 and parts[1] != "support" \
        and any(p.startswith("test_") or p == "conftest" for p in parts[1:])


def test_no_test_module_imports_another() -> None:
    reaching = [f"{path.relative_to(ROOT)}:{line}: imports {module}"
                for path in sorted(TESTS.rglob("*.py"))
                for line, module in imported_modules(path.read_text(), package_of(path))
                if is_test_module(module)]
    assert reaching == [], "put what tests share in tests/support:\n" + "\n".join(reaching)


@pytest.mark.parametrize(("text", "reaches"), [
    ("from tests.unit.test_plan import x\n", True),
    ("from .test_plan import x\n", True),
    ("from . import test_plan\n", True),
    ("import tests.testbed.test_agent\n", True),
    ("from tests.testbed import test_agent\n", True),
    ("from ..testbed.test_agent import x\n", True),
    ("from tests.support.testbedtools import tfctl\n", False),
    ("from . import helpers\n", False),
    ("import tests.support.testbed.fixtures\n", False),
])
def test_each_way_of_importing_a_test_module_is_seen(text: str, reaches: bool) -> None:
    names = [module for _, module in imported_modules(text, "tests.unit")]
    assert any(is_test_module(m) for m in names) == reaches, names
