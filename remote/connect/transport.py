"""The one interface between tfctl and a host: run a command, stream a command, forward a port.

Three implementations: `ssh.SshTransport` (Fabric over paramiko), `local.LocalTransport`
(subprocess, for `transport: local` hosts such as the demo's) and `hold.borrow.HeldTransport`
(agent sessions lent by the holder, the rest over the command's own SSH connection). Everything
above this module is transport-blind, which is what makes `tfctl demo` the same code path as a
real lab.

What a transport can do beyond running a command is declared here, each with the answer of a
transport that cannot (`None`), so callers ask the interface rather than probe the object:
agent sessions (`open_pipe`), forgetting a dead link (`drop_link`), the SSH connection for
tunnels and terminals (`paramiko_transport`), SFTP (`sftp`), and rsync's remote shell (`relay`).
"""

from __future__ import annotations

import shlex
import socket
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from tfctl.inventory.model import Host

if TYPE_CHECKING:
    import paramiko


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


class Pipe(Protocol):
    """A command with its stdin kept open (`SshTransport.open_pipe`): a raw paramiko channel
    under the host's Fabric Connection, since requests and answers go line by line for as long
    as the session lives, which Fabric's `run` (stdin from a stream, output at its end) cannot."""

    @property
    def alive(self) -> bool: ...

    @property
    def booted(self) -> bool:
        """The agent already has its program (a session the holder lent, hold/borrow.py)."""

    @property
    def reused(self) -> bool:
        """The session was up before this command asked for it: it answers within a round
        trip, or its link is dead."""

    @property
    def link_lost(self) -> bool:
        """The connection under the session is gone: an ended output says nothing about the
        command."""

    def send(self, data: bytes) -> None: ...

    def read_line(self, timeout_s: float | None) -> bytes | None: ...

    def finish(self, wait_s: float = ...) -> tuple[int | None, str]: ...

    def end_input(self) -> None: ...

    def release(self, owed: int) -> bool:
        """Hand a lent session back to its lender between two requests (`owed` answers to
        posted requests still to come); False for a session this command owns and ends."""

    def close(self) -> None: ...


class Transport(Protocol):
    host: Host

    @property
    def options(self) -> SshOptions: ...

    def run(self, command: str, stdin: str | None = None, timeout_s: float | None = None
            ) -> Result: ...

    def stream(self, command: str) -> Stream: ...

    def open_pipe(self, command: str) -> Pipe | None:
        """`command` with stdin left open, a session to talk to; None where the transport has
        none (`transport: local`: each agent operation is a process of its own)."""

    def relay(self, sock: socket.socket, command: str) -> tuple[int | None, str]:
        """Run `command` with its stdin and stdout joined to `sock` until its output ends: the
        exit status and its stderr (rsync's remote shell)."""

    @property
    def paramiko_transport(self) -> paramiko.Transport | None:
        """The host's SSH connection, opened if it is not (tunnels, terminals); None where the
        host is not reached over SSH."""

    def sftp(self) -> paramiko.SFTPClient | None:
        """An SFTP session on the host's connection (the rsync-less sync); None without SSH."""

    def drop_link(self) -> None:
        """The host did not answer in time: its connection goes, and the next request connects
        afresh."""

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
