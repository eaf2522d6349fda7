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
    """`command` in a 160×48 tmux session; `env` is added to a plain terminal's environment.

    Each pane has a tmux server of its own (`tmux -L`): with one shared server, a pane closed
    just before another opens can take the server down under the new one ("server exited
    unexpectedly"), since tmux leaves when its last session ends."""

    def __init__(self, command: str, env: Mapping[str, str] | None = None,
                 name: str = "tfctl") -> None:
        self.session = f"{name}-{time.monotonic_ns()}"
        subprocess.run(["tmux", "-L", self.session, "new-session", "-d", "-s", self.session,
                        "-x", "160", "-y", "48", *marker_args(), command], check=True,
                       env={**TERMINAL_ENV, **(env or {})})

    def tmux(self, *args: str) -> subprocess.CompletedProcess[str]:
        """A tmux command on this pane's server (`-t` it with `self.session`)."""
        return subprocess.run(["tmux", "-L", self.session, *args], capture_output=True,
                              text=True)

    def text(self) -> str:
        return self.tmux("capture-pane", "-p", "-t", self.session).stdout

    def keys(self, *keys: str) -> None:
        sent = self.tmux("send-keys", "-t", self.session, *keys)
        assert sent.returncode == 0, f"tmux send-keys {keys}: {sent.stderr}"

    def pid(self) -> int:
        """The pid of the pane's program (tmux's child)."""
        return int(self.tmux("display-message", "-p", "-t", self.session, "#{pane_pid}").stdout)

    def alive(self) -> bool:
        """Whether the program (the session) still runs."""
        return self.tmux("has-session", "-t", self.session).returncode == 0

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
        self.tmux("kill-server")
