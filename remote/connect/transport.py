"""The one interface between tfctl and a host: run a command, stream a command, forward a port.

Two implementations: `ssh.SshTransport` (Fabric over paramiko) and `local.LocalTransport`
(subprocess, for `transport: local` hosts such as the demo's). Everything above this module is
transport-blind, which is what makes `tfctl demo` the same code path as a real lab.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Protocol

from tfctl.inventory.model import Host


@dataclass(frozen=True)
class SshOptions:
    """Connection settings that come from the command line rather than the inventory.

    Here rather than in ssh.py so that code which only passes them on does not import paramiko
    (~50 ms), which `Fleet` imports when it opens its first SSH connection.
    """

    connect_timeout_s: float = 5.0
    accept_new_host_keys: bool = False
    persist_s: float = 0.0
    """Keep this command's connections and agent sessions this long after it for the next
    command (`hold/`, as OpenSSH's ControlPersist); 0: none (the dashboard, the library)."""


@dataclass(frozen=True)
class Result:
    host: str
    command: str
    exit_code: int
    stdout: str
    stderr: str

    @property
    def ok(self) -> bool:
        return self.exit_code == 0

    def tail(self, lines: int = 15) -> str:
        text = (self.stdout + ("\n" if self.stdout and self.stderr else "") + self.stderr).rstrip()
        return "\n".join(text.splitlines()[-lines:])


class Stream(Protocol):
    """A long-lived command's output, line by line (telemetry, `logs -f`)."""

    def lines(self) -> Iterator[str]: ...

    def close(self) -> None: ...


class Transport(Protocol):
    host: Host

    def run(self, command: str, stdin: str | None = None, timeout_s: float | None = None
            ) -> Result: ...

    def stream(self, command: str) -> Stream: ...

    def close(self) -> None: ...


def shell_path(path: str) -> str:
    """Quote a path for a POSIX shell while keeping a leading `~/` meaning the remote home."""
    if path == "~":
        return '"$HOME"'
    if path.startswith("~/"):
        return '"$HOME"/' + shlex.quote(path[2:])
    return shlex.quote(path)


def python_program_command(python: str) -> str:
    """The command that runs a Python program given on stdin with the host's interpreter."""
    return f"{shell_path(python)} -"
