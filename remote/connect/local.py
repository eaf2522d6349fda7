"""Local transport: a `transport: local` host runs its commands as local processes.

Same contract as SSH (a shell command, stdin, exit status), so launch, manifests, status and
down are one code path whether the host is this machine (the demo) or a lab box.
"""

from __future__ import annotations

import socket
import subprocess
from collections.abc import Iterator

from tfctl.inventory.model import Host
from tfctl.remote.connect.transport import Result, SshOptions
from tfctl.remote.errors import HostUnreachable


class LocalTransport:
    """A host that is this machine: no connection, so no agent sessions (each operation is a
    process), no SSH link for tunnels or terminals, no SFTP."""

    def __init__(self, host: Host):
        self.host = host
        self.options = SshOptions()

    def run(self, command: str, stdin: str | None = None, timeout_s: float | None = None
            ) -> Result:
        try:
            proc = subprocess.run(["/bin/sh", "-c", command], input=stdin, capture_output=True,
                                  text=True, timeout=timeout_s, errors="replace")
        except subprocess.TimeoutExpired:
            raise HostUnreachable(self.host.name,
                                  f"no answer within {timeout_s:.0f} s to `{command[:60]}`") \
                from None
        return Result(self.host.name, command, proc.returncode, proc.stdout, proc.stderr)

    def stream(self, command: str) -> LocalStream:
        return LocalStream(command)

    def open_pipe(self, command: str) -> None:
        return None

    def relay(self, sock: socket.socket, command: str) -> tuple[int | None, str]:
        """`command` as a local process with its stdin and stdout on `sock`."""
        proc = subprocess.run(["/bin/sh", "-c", command], stdin=sock.fileno(),
                              stdout=sock.fileno(), stderr=subprocess.PIPE)
        return proc.returncode, proc.stderr.decode(errors="replace")

    @property
    def paramiko_transport(self) -> None:
        return None

    def sftp(self) -> None:
        return None

    def drop_link(self) -> None:
        pass

    def close(self) -> None:
        pass


class LocalStream:
    def __init__(self, command: str):
        self.proc = subprocess.Popen(["/bin/sh", "-c", command], stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)

    def lines(self) -> Iterator[str]:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            yield raw.decode(errors="replace").rstrip("\n")

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        if self.proc.stdout:
            self.proc.stdout.close()
