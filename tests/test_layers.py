"""Headless commands stay light: `tfctl plan` and `--help` never import textual, tensorflow or
fabric (import-linter checks the static layers; this checks what really gets imported)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).parent.parent / "examples" / "two-hosts.yaml"
PROBE = """
import json, sys
from tfctl.tui.cli.main import main
try:
    main({args!r}, prog_name="tfctl")
except SystemExit:
    pass
heavy = sorted({{m.split(".")[0] for m in sys.modules}} & {{"textual", "tensorflow", "fabric",
                                                         "paramiko", "invoke", "matplotlib"}})
print(json.dumps(heavy), file=sys.stderr)
"""


@pytest.mark.parametrize("args", [["--help"], ["-i", str(EXAMPLE), "plan"],
                                  ["-i", str(EXAMPLE), "plan", "--json"], ["plan", "--help"],
                                  ["up", "--help"], ["report", "--help"], ["runs", "--help"]])
def test_headless_paths_import_nothing_heavy(args: list[str]) -> None:
    proc = subprocess.run([sys.executable, "-c", PROBE.format(args=args)], capture_output=True,
                          text=True, check=True)
    assert json.loads(proc.stderr.strip().splitlines()[-1]) == []


def test_every_command_is_documented_in_the_readme_with_an_example() -> None:
    from click.testing import CliRunner

    from tfctl.tui.cli.main import COMMANDS, main

    readme = (Path(__file__).parent.parent / "README.md").read_text()
    for name in COMMANDS:
        assert f"tfctl {name}" in readme, f"README does not document `tfctl {name}`"
        out = CliRunner().invoke(main, [name, "--help"]).output
        assert "Example:" in out and "tfctl " in out.split("Example:")[1], name
