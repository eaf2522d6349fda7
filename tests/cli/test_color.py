"""Colour: `--color`/`--no-color` (before or after the subcommand) beats `NO_COLOR`
(https://no-color.org: any non-empty value turns colour off), which beats "is the stream a
terminal". Checked in real processes, through a pipe and in a pseudo-terminal, on stdout (rich's
plan table), on stderr (`say`, the group's `error:`), by the presence of ANSI SGR codes."""

from __future__ import annotations

import errno
import fcntl
import os
import re
import struct
import subprocess
import sys
import termios
from pathlib import Path

import pytest

from tests.support.localcluster import local_cluster

SGR = re.compile(r"\x1b\[[0-9;]*m")


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "FORCE_COLOR")}
    return {**env, "TERM": "xterm-256color", **extra}


def piped(inv: Path, *args: str, **env: str) -> tuple[str, str]:
    proc = subprocess.run([sys.executable, "-m", "tfctl.tui", "-i", str(inv), *args],
                          capture_output=True, text=True, timeout=60, env=clean_env(**env),
                          cwd=inv.parent)
    return proc.stdout, proc.stderr


def in_terminal(inv: Path, *args: str, **env: str) -> str:
    """What the command writes to a terminal (stdout and stderr both on one pty)."""
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    proc = subprocess.Popen([sys.executable, "-m", "tfctl.tui", "-i", str(inv), *args],
                            stdin=slave, stdout=slave, stderr=slave, env=clean_env(**env),
                            cwd=inv.parent)
    os.close(slave)
    chunks = []
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError as exc:  # EIO: the child closed the terminal
            if exc.errno != errno.EIO:
                raise
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(master)
    proc.wait(timeout=60)
    return b"".join(chunks).decode(errors="replace")


@pytest.fixture
def inv(tmp_path: Path) -> Path:
    return local_cluster(tmp_path, {"a": {}})


def coloured(text: str) -> bool:
    return bool(SGR.search(text))


def test_piped_output_has_no_colour_unless_asked(inv: Path) -> None:
    for args in (("plan",), ("sync",)):
        out, err = piped(inv, *args)
        assert not coloured(out) and not coloured(err), args
    out, _ = piped(inv, "--color", "plan")
    assert coloured(out)
    _, err = piped(inv, "sync", "--color")  # after the subcommand too
    assert "tfctl: a: unchanged" in SGR.sub("", err) and coloured(err)
    out, err = piped(inv, "plan", "--color", NO_COLOR="1")  # the flag beats NO_COLOR
    assert coloured(out)
    _, err = piped(inv.parent / "missing.yaml", "--color", "status")  # the group's error line
    assert err.startswith("\x1b[31merror: ")


def test_a_terminal_gets_colour_unless_no_color_or_the_flag_says_no(inv: Path) -> None:
    assert coloured(in_terminal(inv, "plan"))
    assert coloured(in_terminal(inv, "sync"))
    assert coloured(in_terminal(inv, "plan", NO_COLOR=""))  # empty: not set, says no-color.org
    for args, env in [(("plan",), {"NO_COLOR": "1"}), (("sync",), {"NO_COLOR": "yes"}),
                      (("--no-color", "plan"), {}), (("plan", "--no-color"), {}),
                      (("sync", "--no-color"), {}), (("--color", "plan", "--no-color"), {})]:
        text = in_terminal(inv, *args, **env)
        assert "tfctl" in text or "loc" in text, text
        assert not coloured(text), (args, env, text)
    assert coloured(in_terminal(inv, "--color", "plan", NO_COLOR="1"))
    errors = in_terminal(inv.parent / "missing.yaml", "status", NO_COLOR="1")
    assert "error: " in errors and not coloured(errors)
