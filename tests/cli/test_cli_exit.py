"""`tfctl`'s own exit (`tui/cli/main.py: run`): it skips the interpreter's module teardown with
`os._exit`, so these check that nothing of what a caller sees is lost: the exit status, every
byte of output through a pipe or a file, and atexit handlers."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner

from tfctl.tui.cli.main import main

EXAMPLE = Path(__file__).parents[2] / "examples" / "two-hosts.yaml"


def tfctl(*args: str, stdout: int | None = subprocess.PIPE) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tfctl.tui", *args], stdout=stdout,
                          stderr=subprocess.PIPE, text=True, timeout=60)


def test_output_through_a_pipe_is_complete_and_the_status_kept() -> None:
    expected = CliRunner().invoke(main, ["-i", str(EXAMPLE), "plan", "--json"]).output
    proc = tfctl("-i", str(EXAMPLE), "plan", "--json")
    assert proc.returncode == 0
    assert proc.stdout == expected and len(expected) > 1000


def test_output_to_a_file_is_complete(tmp_path: Path) -> None:
    out = tmp_path / "plan.json"
    with out.open("w") as fh:
        proc = tfctl("-i", str(EXAMPLE), "plan", "--json", stdout=fh.fileno())
    assert proc.returncode == 0
    assert out.read_text() == CliRunner().invoke(main, ["-i", str(EXAMPLE), "plan",
                                                        "--json"]).output


def test_errors_keep_their_exit_status_and_sentence(tmp_path: Path) -> None:
    proc = tfctl("-i", str(tmp_path / "missing.yaml"), "plan")
    assert proc.returncode == 2
    assert "missing.yaml: no such file" in proc.stderr and "Traceback" not in proc.stderr
    assert tfctl("no-such-command").returncode == 2
    assert tfctl("--help").returncode == 0


def test_atexit_handlers_still_run_and_their_output_is_flushed(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    probe = (f"import atexit, pathlib, sys\n"
             f"atexit.register(lambda: pathlib.Path({str(marker)!r}).write_text('yes'))\n"
             f"atexit.register(lambda: print('written at exit, not flushed'))\n"
             f"sys.argv = ['tfctl', '--help']\n"
             f"from tfctl.tui.cli.main import run\n"
             f"run()\n")
    buffered = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          timeout=60, env=buffered)
    assert proc.returncode == 0 and "Usage:" in proc.stdout
    assert marker.read_text() == "yes"
    assert proc.stdout.endswith("written at exit, not flushed\n")  # flushed before os._exit
