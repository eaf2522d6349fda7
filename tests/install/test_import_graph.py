"""The house's shape, checked: no import cycle anywhere in tfctl (counting imports inside
functions and under TYPE_CHECKING) and the host-side package holding only what runs on the hosts.
Sizes are reported by `scripts/sizes.py` (run by `scripts/lint`), never failed on."""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from pathlib import Path

import pytest

from tfctl.remote.connect.session.program import AGENT_FILES

ROOT = Path(__file__).resolve().parents[2]
LAYERS = ("inventory", "remote", "tui")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(["tfctl", *parts])


def modules() -> dict[str, Path]:
    return {module_name(p): p for layer in LAYERS for p in sorted((ROOT / layer).rglob("*.py"))}


def imports_of(name: str, path: Path, known: Iterable[str]) -> set[str]:
    """Every tfctl module `path` imports, wherever the import statement stands."""
    known = set(known)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[:len(anchor) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            for alias in node.names:
                candidate = f"{base}.{alias.name}"
                found.add(candidate if candidate in known else base)
    return {m for m in found if m in known and m != name}


def find_cycle(graph: Mapping[str, set[str]]) -> list[str] | None:
    """A cycle of `graph` as a path that ends where it starts, or None."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return [*stack[stack.index(nxt):], nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


@pytest.mark.parametrize(("graph", "cycle"), [
    ({"a": {"b"}, "b": {"c"}, "c": set()}, None),
    ({"a": {"b"}, "b": {"a"}}, ["a", "b", "a"]),
    ({"a": {"b"}, "b": {"c"}, "c": {"b"}}, ["b", "c", "b"]),
    ({"a": {"a"}}, ["a", "a"]),
])
def test_find_cycle(graph: dict[str, set[str]], cycle: list[str] | None) -> None:
    assert find_cycle(graph) == cycle


def test_relative_and_from_imports_resolve_to_modules(tmp_path: Path) -> None:
    known = {"tfctl.remote.runs.status", "tfctl.remote.runs", "tfctl.remote.connect.fleet"}
    path = ROOT / "remote" / "runs" / "status.py"
    assert imports_of("tfctl.remote.runs.status", path, known | {"tfctl.remote.runs.status"}) \
        >= {"tfctl.remote.connect.fleet"}


def test_no_import_cycle_anywhere() -> None:
    found = modules()
    graph = {name: imports_of(name, path, found) for name, path in found.items()}
    assert sum(len(v) for v in graph.values()) > 100  # the scan sees the real imports
    cycle = find_cycle(graph)
    assert cycle is None, " → ".join(cycle or [])


def test_the_host_side_package_holds_only_what_runs_on_hosts() -> None:
    agent = ROOT / "remote" / "agent"
    python = {p.name for p in agent.glob("*.py")} - {"__init__.py"}
    assert python == set(AGENT_FILES)
    assert {p.suffix for p in agent.iterdir() if p.is_file()} <= {".py", ".sh"}
