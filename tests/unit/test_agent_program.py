"""The agent files are joined into one module on the hosts (`session.program.AGENT_FILES`): a
top-level name defined in two of them would silently replace the other's."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

from tfctl.remote.connect.session.program import AGENT_FILES, agent_source

AGENT_DIR = Path(__file__).resolve().parents[2] / "remote" / "agent"


def _top_level_names(tree: ast.Module) -> set[str]:
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                names.update(n.id for n in ast.walk(target) if isinstance(n, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return names


def test_top_level_names_are_unique_across_agent_files() -> None:
    where: dict[str, list[str]] = defaultdict(list)
    for name in AGENT_FILES:
        for defined in _top_level_names(ast.parse((AGENT_DIR / name).read_text())):
            where[defined].append(name)
    clashes = {n: files for n, files in where.items() if len(files) > 1 and n != "__all__"}
    assert not clashes, f"defined in more than one agent file: {clashes}"


def test_joined_program_defines_each_name_once() -> None:
    counts: dict[str, int] = defaultdict(int)
    for node in ast.parse(agent_source()).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            counts[node.name] += 1
    assert {n: c for n, c in counts.items() if c > 1} == {}
