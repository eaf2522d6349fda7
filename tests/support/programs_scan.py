"""Find the external programs a tree of Python code runs, by reading its source (ast).

What counts as "runs": the argv[0] of a list handed to `subprocess.run/Popen/check_call/
check_output/call` or to one of the project's own runner helpers (`RUNNERS`); the program after
the namespace in `ip netns exec NS PROG …`; the first word of each command in a `sh -c` /
`bash -c` string; a name given to `shutil.which`. An argv built elsewhere is followed one step:
a variable assigned a list in the same module, or a function whose `return` is a list.
"""

from __future__ import annotations

import ast
import re
import shlex
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

# Calls whose first positional argument (or `args=`) is an argv.
RUNNERS = frozenset({"run", "Popen", "check_call", "check_output", "_netns_run", "start"})
# Names that are runners only as `subprocess.NAME` (tests have helpers of their own so named).
MODULE_ONLY = frozenset({"call"})
SHELLS = frozenset({"sh", "bash", "dash"})
# Shell words that are not programs on the PATH.
SHELL_BUILTINS = frozenset({"exit", "echo", "cd", "export", "set", "true", "false", "test", "[",
                            "exec", "read", "wait", "trap", "printf", "shift", "unset", ":", ".",
                            "source", "return", "local", "if", "then", "fi", "for", "do", "done",
                            "while", "else", "elif", "case", "esac", "{", "}", "!"})
_WORD = re.compile(r"^[A-Za-z0-9/][A-Za-z0-9_./+-]*$")


@dataclass(frozen=True)
class Use:
    """A program run by the code, and where."""

    program: str
    where: str


def scan_tree(roots: Iterable[Path], base: Path) -> list[Use]:
    uses: list[Use] = []
    for root in roots:
        files = [root] if root.is_file() else sorted(root.rglob("*.py"))
        for path in files:
            uses += scan_source(path.read_text(), str(path.relative_to(base)))
    return uses


def scan_source(source: str, name: str = "<source>") -> list[Use]:
    tree = ast.parse(source)
    scanner = _Module(tree)
    return [Use(program, f"{name}:{line}") for program, line in scanner.programs()]


class _Module:
    def __init__(self, tree: ast.Module) -> None:
        self.tree = tree
        self.assigned: dict[str, list[ast.expr]] = {}
        self.returns: dict[str, list[ast.expr]] = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.Assign):
                for target in node.targets:
                    if isinstance(target, ast.Name):
                        self.assigned.setdefault(target.id, []).append(node.value)
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                if node.value is not None:
                    self.assigned.setdefault(node.target.id, []).append(node.value)
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                self.returns[node.name] = [r.value for r in ast.walk(node)
                                           if isinstance(r, ast.Return) and r.value is not None]

    def programs(self) -> Iterator[tuple[str, int]]:
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Call):
                yield from ((p, node.lineno) for p in self._from_call(node))
            elif isinstance(node, (ast.List, ast.Tuple)):
                # `ip netns exec NS PROG` anywhere, whoever runs the list.
                yield from ((p, node.lineno) for p in self._netns_exec(node.elts))

    def _from_call(self, call: ast.Call) -> list[str]:
        name = _call_name(call)
        if name == "which" and call.args:
            word = self._word(call.args[0])
            return [word] if word else []
        found = self._after_exec_dashdash(call.args)
        on_module = isinstance(call.func, ast.Attribute) and _is_module(call.func)
        if name not in RUNNERS and not (name in MODULE_ONLY and on_module):
            return found
        argv = call.args[0] if call.args else next(
            (k.value for k in call.keywords if k.arg == "args"), None)
        words = [self._word_text(a) for a in call.args]
        if len(call.args) > 1 and all(w is not None and " " not in w for w in words):
            argv = ast.List(elts=list(call.args))  # `bench.start("sleep", "120")`: *argv
        elif len(call.args) > 1 and (name == "_netns_run" or (
                isinstance(call.func, ast.Attribute) and not on_module)):
            argv = call.args[1]  # `testbed.run(host, command)`: the command comes second
        if argv is None:
            return found
        text = self._word_text(argv)
        if text is not None:  # a string: a shell line (shell=True, or the testbed's `bash -c`)
            return found + shell_programs(text)
        return found + self._argv_programs(argv, depth=0)

    def _after_exec_dashdash(self, args: list[ast.expr]) -> list[str]:
        """`tfctl(inv, "exec", "--", PROG, …)`: a program run on the hosts through tfctl."""
        texts = [self._word_text(a) for a in args]
        for i in range(len(texts) - 2):
            if texts[i] == "exec" and texts[i + 1] == "--":
                return self._list_programs(args[i + 2:], 0)
        return []

    def _argv_programs(self, node: ast.expr, depth: int) -> list[str]:
        if depth > 3:
            return []
        if isinstance(node, (ast.List, ast.Tuple)):
            return self._list_programs(node.elts, depth)
        if isinstance(node, ast.Starred):
            return self._argv_programs(node.value, depth + 1)
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            return self._argv_programs(node.left, depth + 1)
        if isinstance(node, ast.IfExp):
            return (self._argv_programs(node.body, depth + 1)
                    + self._argv_programs(node.orelse, depth + 1))
        if isinstance(node, ast.Name):
            return [p for value in self.assigned.get(node.id, [])
                    for p in self._argv_programs(value, depth + 1)]
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            return [p for value in self.returns.get(node.func.id, [])
                    for p in self._argv_programs(value, depth + 1)]
        return []

    def _list_programs(self, elts: list[ast.expr], depth: int) -> list[str]:
        if not elts:
            return []
        first = elts[0]
        if isinstance(first, ast.Starred):
            # `[*prefix, PROG, …]`: a prefix we can follow names the program; otherwise the
            # prefix is a wrapper (`ip netns exec NS`) and the program comes next.
            return (self._argv_programs(first.value, depth + 1)
                    or self._list_programs(elts[1:], depth + 1))
        word = self._word(first)
        if word is None:
            return []
        if word in SHELLS and len(elts) > 2 and self._word_text(elts[1]) == "-c":
            text = self._word_text(elts[2])
            return [word, *(shell_programs(text) if text else [])]
        return [word]

    def _netns_exec(self, elts: list[ast.expr]) -> list[str]:
        texts = [self._word_text(e) for e in elts]
        for i in range(len(texts) - 2):
            if texts[i] == "netns" and texts[i + 1] == "exec" and i + 3 < len(elts):
                return self._list_programs(elts[i + 3:], 0)
        return []

    def _word_text(self, node: ast.expr) -> str | None:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return node.value
        if isinstance(node, ast.Name):
            values = self.assigned.get(node.id, [])
            if len(values) == 1:
                return self._word_text(values[0])
        return None

    def _word(self, node: ast.expr) -> str | None:
        """A program name (the basename of a path), or None when not a literal command word."""
        text = self._word_text(node)
        if text is None or not _WORD.match(text) or text.endswith(".py"):
            return None  # not a command word, or one of the project's own scripts
        return text.rsplit("/", 1)[-1]


def _is_module(func: ast.Attribute) -> bool:
    """`subprocess.run`: the receiver is a module, so the argv is the first argument."""
    return isinstance(func.value, ast.Name) and func.value.id in {"subprocess", "sp"}


def _call_name(call: ast.Call) -> str | None:
    if isinstance(call.func, ast.Attribute):
        return call.func.attr
    if isinstance(call.func, ast.Name):
        return call.func.id
    return None


def shell_programs(text: str) -> list[str]:
    """The first word of every simple command in a shell line (`a x; b | c && d`)."""
    found = []
    text = re.sub(r"\d*[<>]+&?\s*\S+", " ", text)  # redirections: `2>&1`, `>/dev/null`
    for command in re.split(r"[;\n|&()]+|\$\(", text):
        try:
            words = shlex.split(command, comments=True)
        except ValueError:
            words = command.split()
        while words and ("=" in words[0] or words[0] in {"exec", "!", "then", "do", "else"}):
            words = words[1:]
        if words and words[0] not in SHELL_BUILTINS and _WORD.match(words[0]):
            found.append(words[0].rsplit("/", 1)[-1])
    return found
