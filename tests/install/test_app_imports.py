"""The dashboard's modules import each other without cycles: every `import` counts, including
those under TYPE_CHECKING and inside functions. Only the factory imports the app; the app's
actions and workers get what they need as arguments and small Protocols."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).parents[2]
APP = ROOT / "tui" / "app"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(["tfctl", *parts])


def imports_of(path: Path) -> set[str]:
    """Every module an `import` statement anywhere in the file names (and `from X import Y`'s
    `X.Y`, in case Y is a module)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            assert node.level == 0, f"{path}: relative import"
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def tui_graph() -> dict[str, set[str]]:
    files = {module_name(p): p for p in (ROOT / "tui").rglob("*.py")}
    return {name: imports_of(path) & set(files) - {name} for name, path in files.items()}


def test_the_tui_modules_import_each_other_without_cycles() -> None:
    graph = tui_graph()
    done: set[str] = set()

    def visit(node: str, path: list[str]) -> None:
        if node in path:
            raise AssertionError("import cycle: " + " -> ".join([*path[path.index(node):],
                                                                 node]))
        if node in done:
            return
        for nxt in sorted(graph[node]):
            visit(nxt, [*path, node])
        done.add(node)

    for node in sorted(graph):
        visit(node, [])


def test_only_the_factory_imports_the_app() -> None:
    graph = tui_graph()
    importers = sorted(name for name, deps in graph.items() if "tfctl.tui.app.app" in deps)
    assert importers == ["tfctl.tui.app.factory"]
    assert not graph["tfctl.tui.app"], "tui/app/__init__.py stays import-light"
    assert "tfctl.tui.app.factory" not in graph["tfctl.tui.app.workers"]
