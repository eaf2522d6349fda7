"""A program (`tfctl ui`) running in a detached tmux session, read by `capture-pane`: how the lab
tests look at the dashboard in a real terminal (Textual draws on stderr, so it is not redirected).
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable, Mapping

from tests.support.leftovers import SESSION_VAR

TERMINAL_ENV = {"TERM": "xterm-256color", "PATH": "/usr/bin:/bin", "TZ": "UTC"}


def marker_args() -> list[str]:
    """`-e NAME=VALUE` for `tmux new-session`: the program in the pane carries the test
    session's marker (tests/support/leftovers.py) and its state folder (XDG_STATE_HOME, where
    the session's commands remember their current run: tests/conftest.py), even where a tmux
    server started by someone else (with another environment) runs it."""
    return [arg for name in (SESSION_VAR, "XDG_STATE_HOME") if os.environ.get(name)
            for arg in ("-e", f"{name}={os.environ[name]}")]


class Pane:
    """`command` in a 160×48 tmux session; `env` is added to a plain terminal's environment."""

    def __init__(self, command: str, env: Mapping[str, str] | None = None,
                 name: str = "tfctl") -> None:
        self.session = f"{name}-{time.monotonic_ns()}"
        subprocess.run(["tmux", "new-session", "-d", "-s", self.session, "-x", "160", "-y", "48",
                        *marker_args(), command], check=True,
                       env={**TERMINAL_ENV, **(env or {})})

    def text(self) -> str:
        return subprocess.run(["tmux", "capture-pane", "-p", "-t", self.session],
                              capture_output=True, text=True).stdout

    def keys(self, *keys: str) -> None:
        subprocess.run(["tmux", "send-keys", "-t", self.session, *keys], check=True)

    def wait(self, what: str, check: Callable[[str], bool], timeout_s: float = 60.0,
             never: Callable[[str], str | None] | None = None) -> str:
        """Capture until `check` holds; `never` names anything that must not show meanwhile."""
        deadline = time.monotonic() + timeout_s
        screen = ""
        while time.monotonic() < deadline:
            screen = self.text()
            if never is not None and (bad := never(screen)):
                raise AssertionError(f"{bad}; screen:\n{screen}")
            if check(screen):
                return screen
            time.sleep(0.3)
        raise AssertionError(f"{what}: not within {timeout_s:g} s; screen:\n{screen}")

    def close(self) -> None:
        subprocess.run(["tmux", "kill-session", "-t", self.session], capture_output=True)
