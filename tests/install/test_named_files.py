"""Every `.py` file the tree's prose names exists: the docstrings and comments of its Python
files and its Markdown pages. A module renamed or cut in two leaves names behind in what
explains it; this finds them. Names of other projects' files, cited on purpose (TensorFlow's
sources, httpx's, a user's own script in an example inventory), are listed here by name.
"""

from __future__ import annotations

import ast
import io
import re
import shutil
import subprocess
import tokenize
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

OTHER_PROJECTS = ("tensorflow/", "keras/", "torch/", "jax/", "fabric/", "invoke/", "httpx/",
                  ".../")
"""Path prefixes of other projects' files (TensorFlow, Keras, PyTorch, JAX, Fabric, invoke,
httpx)."""
NOT_OURS = {
    # TensorFlow's and Keras' sources, named where the rules they hold are cited
    "saving_api.py", "mirrored_strategy.py", "collective_all_reduce_strategy.py",
    "parameter_server_strategy_v2.py", "device_setter.py",
    # httpx's error tree and transports, which remote/errors.py and the engines follow
    "_exceptions.py", "_transports/base.py",
    # the user's scripts an example inventory or a test job names (the light job runs as job.py)
    "eval.py", "job.py",
}
"""Bare names (or short paths) of files that are not this project's."""

PY_NAME = re.compile(r"(?<![\w./-])((?:[\w.-]+/)*[A-Za-z_][\w-]*\.py)\b(?!\.\w)")
"""A file name ending in .py, with the folders written before it (not `x.pyc`, `x.py.bak`)."""
WRAPPED = re.compile(r"/\n[ \t]*(?:#[ \t]*)?")
"""A line break (and a comment's or docstring's indent) right after a slash, inside a path."""


def tree_files() -> list[str]:
    """The files a clone of the working tree has: tracked, and untracked that git does not
    ignore."""
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("needs a git checkout of tfctl and git")
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                            cwd=ROOT, capture_output=True, check=True).stdout.decode()
    return sorted(p for p in set(listed.split("\0")) if p and (ROOT / p).is_file())


def prose(path: str, text: str) -> Iterator[tuple[int, str]]:
    """(line, text) of what explains the code: a Markdown page whole; of a Python file its
    docstrings (of the module, classes and functions, and the strings that document a name)
    and its comments."""
    if path.endswith(".md"):
        yield 1, text
        return
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) \
                and isinstance(node.value.value, str):
            yield node.lineno, node.value.value
    for token in tokenize.generate_tokens(io.StringIO(text).readline):
        if token.type == tokenize.COMMENT:
            yield token.start[0], token.string


def named_but_missing(files: list[str], texts: dict[str, str]) -> list[str]:
    """`path:line: name` for every `.py` name in the prose of `texts` (path → text) that is no
    file of `files` (a bare name: any file so called; a path: a file ending so) and no other
    project's."""
    ours = [f for f in files if f.endswith(".py")]
    basenames = {f.rsplit("/", 1)[-1] for f in ours}

    def exists(name: str) -> bool:
        if "/" not in name:
            return name in basenames
        return any(f == name or f.endswith("/" + name) for f in ours)

    missing = []
    for path, text in texts.items():
        for line, words in prose(path, text):
            words = WRAPPED.sub("/", words)  # a path broken after a slash is one name
            for match in PY_NAME.finditer(words):
                name = match.group(1)
                if name in NOT_OURS or name.startswith(OTHER_PROJECTS) or exists(name):
                    continue
                missing.append(f"{path}:{line}: {name}")
    return sorted(set(missing))


def test_the_prose_names_only_files_the_tree_has() -> None:
    files = tree_files()
    texts = {f: (ROOT / f).read_text(errors="replace") for f in files
             if f.endswith((".py", ".md"))}
    missing = named_but_missing(files, texts)
    assert missing == [], "named, but not in the tree:\n" + "\n".join(missing)


def test_what_counts_as_a_name_and_where() -> None:
    files = ["remote/agent/run.py", "tests/testbed/test_core.py", "README.md"]
    module = ('"""Starts tasks (agent/run.py; tests/testbed/test_core.py, agent.py)."""\n'
              "# the old remote/status.py\n"
              'SCRIPT = "gone.py"  # a string in code is no prose: not read\n'
              "def f() -> None:\n"
              '    """As TensorFlow\'s tensorflow/python/training/saver.py does, or job.py."""\n')
    readme = ("Edit `train.py` or `remote/agent/run.py`; see remote/runs/up.py.\n"
              "As torch/distributed/elastic/agent/\n  server/local_elastic_agent.py does.\n")
    assert named_but_missing(files, {"remote/x.py": module, "README.md": readme}) == [
        "README.md:1: remote/runs/up.py", "README.md:1: train.py", "remote/x.py:1: agent.py",
        "remote/x.py:2: remote/status.py"]
