"""An oracle for located inventory errors, independent of the loader: the line of every key
path in a YAML text, from PyYAML's node marks; and the CLI run in-process (click's CliRunner),
held to the loader's verdict on a file."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from click.testing import CliRunner
from hypothesis import event

from tfctl.inventory import InventoryError
from tfctl.tui.cli.main import main


def key_lines(text: str) -> dict[str, int]:
    """Formatted key path (`hosts[1].gpus`) → 1-based line of its key (list items: the item)."""
    root = yaml.compose(text, Loader=yaml.SafeLoader)
    lines: dict[str, int] = {}
    loader = yaml.SafeLoader("")

    def walk(node: yaml.Node, path: str) -> None:
        lines.setdefault(path, node.start_mark.line + 1)
        if isinstance(node, yaml.MappingNode):
            for key_node, value_node in node.value:
                key = str(loader.construct_object(key_node, deep=True))
                child = f"{path}.{key}" if path else key
                lines.setdefault(child, key_node.start_mark.line + 1)
                walk(value_node, child)
        elif isinstance(node, yaml.SequenceNode):
            for i, item in enumerate(node.value):
                walk(item, f"{path}[{i}]")

    if root is not None:
        walk(root, "")
    return lines


def expected_line(key_path: str, lines: dict[str, int]) -> int:
    """The line of `key_path`, or of its longest prefix present in the file."""
    if key_path in lines:
        return lines[key_path]
    best = ""
    for path in lines:
        if path and key_path.startswith(path) and key_path[len(path)] in ".[" \
                and len(path) > len(best):
            best = path
    return lines[best]


def cli(*argv: str) -> Any:
    result = CliRunner().invoke(main, list(argv), catch_exceptions=True)
    exc = result.exception
    assert exc is None or isinstance(exc, SystemExit), (
        f"traceback for {argv!r}: {exc!r}\n{result.output}")
    assert "Traceback" not in result.output, result.output
    return result


def assert_cli_agrees(path: Path, error: InventoryError | None) -> None:
    event("valid" if error is None else f"refused: {error.message[:28]}")
    result = cli("-i", str(path), "plan", "--json")
    if error is None:
        assert result.exit_code == 0, result.output
        return
    assert result.exit_code == 2, result.output
    assert result.stderr == f"error: {error}\n"
    assert str(error).startswith(f"{path}:{error.line}:" if error.line else f"{path}:")
    if error.key_path:
        assert f": {error.key_path}: " in str(error)
    assert "\n" not in str(error).replace(error.key_path, ""), str(error)
