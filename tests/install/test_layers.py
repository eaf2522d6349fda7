"""Headless commands stay light: `tfctl plan`, `init` and `--help` never import textual,
tensorflow, an SSH library (fabric, paramiko, invoke), or the web server of `ui --web`
(textual-serve, aiohttp); import-linter checks the static layers,
this checks what really gets imported. A command that contacts hosts does import Fabric
(tests/testbed/test_openssh.py shows each hop is a Fabric Connection)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).parents[2] / "examples" / "two-hosts.yaml"
PROBE = """
import json, sys
from tfctl.tui.cli.main import main
try:
    main({args!r}, prog_name="tfctl")
except SystemExit:
    pass
heavy = sorted({{m.split(".")[0] for m in sys.modules}} & {{"textual", "tensorflow", "fabric",
                                                         "paramiko", "invoke", "matplotlib",
                                                         "textual_serve", "aiohttp"}})
print(json.dumps(heavy), file=sys.stderr)
"""


@pytest.mark.parametrize("args", [["--help"], ["-i", str(EXAMPLE), "plan"],
                                  ["-i", str(EXAMPLE), "plan", "--json"], ["plan", "--help"],
                                  ["up", "--help"], ["report", "--help"], ["runs", "--help"],
                                  ["ui", "--help"]])
def test_headless_paths_import_nothing_heavy(args: list[str]) -> None:
    proc = subprocess.run([sys.executable, "-c", PROBE.format(args=args)], capture_output=True,
                          text=True, check=True)
    assert json.loads(proc.stderr.strip().splitlines()[-1]) == []


@pytest.mark.parametrize("args", [["init"], ["init", "--hosts", "titan:4,gtx970:1"],
                                  ["init", "--help"], ["ssh", "--help"]])
def test_init_imports_no_ssh_library(args: list[str], tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-c", PROBE.format(args=args)], capture_output=True,
                          text=True, check=True, cwd=tmp_path)
    assert json.loads(proc.stderr.strip().splitlines()[-1]) == []
    if args[-1] != "--help":
        assert (tmp_path / "cluster.yaml").exists()  # it did its work


def test_a_command_that_contacts_a_host_does_import_fabric(tmp_path: Path) -> None:
    """The same probe sees Fabric where it belongs, so the tests above can fail: `exec` to a
    host that refuses at once (a closed local port) still connects through Fabric."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again when the block ends: nothing listens there
    inv = tmp_path / "cluster.yaml"
    inv.write_text(f"name: t\ndefaults: {{known_hosts: {tmp_path}/kh}}\nhosts:\n"
                   f"  - {{name: a, address: 127.0.0.1, port: {port}, gpus: 0}}\n"
                   "job: {script: train.py, style: tf_config}\n")
    proc = subprocess.run([sys.executable, "-c", PROBE.format(
        args=["-i", str(inv), "exec", "--", "true"])], capture_output=True, text=True,
        check=True)
    assert "fabric" in json.loads(proc.stderr.strip().splitlines()[-1])


def test_every_command_is_documented_in_the_readme_with_an_example() -> None:
    from click.testing import CliRunner

    from tfctl.tui.cli.main import COMMANDS, main

    readme = (Path(__file__).parents[2] / "README.md").read_text()
    for name in COMMANDS:
        assert f"tfctl {name}" in readme, f"README does not document `tfctl {name}`"
        out = CliRunner().invoke(main, [name, "--help"]).output
        assert "Example:" in out and "tfctl " in out.split("Example:")[1], name
