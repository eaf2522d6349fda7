"""The agent files are joined into one module on the hosts (`session.program.AGENT_FILES`): a
top-level name defined in two of them would silently replace the other's. And what the program
imports when it starts: only the modules its first requests need (the others on first use)."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest

from tfctl.remote.agent.wire import WIRE_VERSION
from tfctl.remote.connect.session.program import (
    AGENT_FILES,
    DEFERRED_MODULES,
    agent_source,
    client_import_lines,
)

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


# ---------------------------------------------------------------- what an agent start imports

def _annotations(tree: ast.AST) -> set[int]:
    """ids of the nodes inside annotations (strings on the hosts: never evaluated there)."""
    inside: set[int] = set()
    for node in ast.walk(tree):
        found: list[ast.AST | None] = []
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            found.append(node.returns)
            arguments = node.args
            found += [a.annotation for a in (*arguments.posonlyargs, *arguments.args,
                                             *arguments.kwonlyargs)]
            found += [a.annotation for a in (arguments.vararg, arguments.kwarg) if a]
        elif isinstance(node, ast.AnnAssign):
            found.append(node.annotation)
        inside.update(id(n) for a in found if a is not None for n in ast.walk(a))
    return inside


def _evaluated_at_import(tree: ast.Module) -> list[ast.AST]:
    """The nodes a module's import evaluates: everything but function bodies (decorators,
    defaults, class bodies and module statements are run)."""
    todo: list[ast.AST] = list(tree.body)
    found: list[ast.AST] = []
    while todo:
        node = todo.pop()
        found.append(node)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            todo += node.decorator_list + node.args.defaults
            todo += [d for d in node.args.kw_defaults if d is not None]
        elif isinstance(node, ast.Lambda):
            todo += node.args.defaults
        else:
            todo += ast.iter_child_nodes(node)
    return found


@pytest.mark.parametrize("name", AGENT_FILES)
def test_deferred_modules_are_not_used_when_the_program_loads(name: str) -> None:
    """The program imports `DEFERRED_MODULES` on their first use (wire.LaterModule): a file
    that used one at its top level (a decorator, a compiled pattern, a default) would import
    it at every agent start."""
    tree = ast.parse((AGENT_DIR / name).read_text())
    skip = _annotations(tree)
    used = sorted({f"{node.value.id}.{node.attr} (line {node.lineno})"
                   for node in _evaluated_at_import(tree)
                   if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                   and node.value.id in DEFERRED_MODULES and id(node) not in skip})
    assert used == []


@pytest.mark.parametrize("name", AGENT_FILES)
def test_the_names_of_cut_imports_are_only_annotations(name: str) -> None:
    """`from typing import ...`, `from collections.abc import ...` are cut from the program: a
    name they bring may appear in annotations only (strings there), never in code that runs."""
    text = (AGENT_DIR / name).read_text()
    tree = ast.parse(text)
    cut = client_import_lines(text.splitlines(keepends=True))
    brought = {alias.asname or alias.name for node in tree.body
               if isinstance(node, ast.ImportFrom) and node.lineno - 1 in cut
               and not (node.module or "").startswith(("tfctl", "__future__"))
               for alias in node.names}
    skip = _annotations(tree)
    skip |= {id(n) for node in ast.walk(tree) if isinstance(node, ast.If)
             and isinstance(node.test, ast.Name) and node.test.id == "MYPY"
             for n in ast.walk(node)}
    used = sorted({f"{node.id} (line {node.lineno})" for node in ast.walk(tree)
                   if isinstance(node, ast.Name) and node.id in brought and id(node) not in skip})
    assert used == []


def test_an_agent_start_imports_no_module_it_does_not_need(tmp_path: Path) -> None:
    """A session answering `runs` and a `status` of no run imports nothing beyond what `os`,
    `pwd`, `errno` and the JSON accelerator bring: not json or re (and enum), signal,
    contextlib, functools, dataclasses, typing (issue 35: each is milliseconds of a start)."""
    program = tmp_path / "agent.py"
    program.write_text(agent_source() + "\nimport sys\nserve(sys.stdin.buffer)\n"
                       "sys.stderr.write(' '.join(sys.modules))\n")
    work = str(tmp_path / "work")
    requests = [{"op": "runs", "workdir": work, "v": WIRE_VERSION},
                {"op": "status", "workdir": work, "run_id": "r1", "v": WIRE_VERSION}]
    done = subprocess.run([sys.executable, "-S", str(program)], capture_output=True,
                          input="".join(json.dumps(r) + "\n" for r in requests).encode(),
                          timeout=60, check=True)
    answers = [line for line in done.stdout.splitlines() if line.startswith(b"\x1e")]
    assert len(answers) == 4  # acknowledged and answered, each
    floor = subprocess.run([sys.executable, "-S", "-c", "import sys, os, pwd, errno, stat, "
                            "_json, __future__; print(' '.join(sys.modules))"],
                           capture_output=True, text=True, check=True).stdout.split()
    assert set(done.stderr.decode().split()) - set(floor) == set()


def test_the_payload_is_built_once_when_every_host_thread_asks_at_once() -> None:
    """A cold command's fleet threads all ask for the agent program at the same moment: one of
    them builds it and its compressed line, the others wait for it and share it (built per
    thread, it held the interpreter lock up to 16 times as long)."""
    import threading

    from tfctl.remote.connect.session import agentclient

    agentclient._built.clear()
    agent_source.cache_clear()  # the build takes its whole time again: the window to race in
    start = threading.Barrier(16)
    got: list[tuple[object, bytes]] = []

    def ask() -> None:
        start.wait()
        found = agentclient.payload()
        got.append((found, found.line))

    threads = [threading.Thread(target=ask) for _ in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert len(got) == 16
    assert len({id(found) for found, _ in got}) == 1
    assert len({id(line) for _, line in got}) == 1
    assert got[0][1] == agentclient._compressed(got[0][0].program)  # type: ignore[attr-defined]
