"""SSH transport: one Fabric `Connection` per host per command, verified host keys.

`sshconfig.resolve` (OpenSSH's `ssh -G`) says where and as whom; `connection.HostConnection`
is the host's Fabric Connection (a Connection per ProxyJump hop as its gateway), with tfctl's
host-key policy on every hop. One-shot commands (`run`) and SFTP go through Fabric
(`Connection.run`, `Connection.sftp`). Where Fabric is the wrong tool the paramiko client under
the Connection (`Connection.client`, `.transport`) is used directly, each place saying why:
a long-lived command's output read line by line and closed early (`stream`), the agent's
session with stdin kept open (`open_pipe`), the rsync bridge (`relay`), the tunnel
(`paramiko_transport`). Every connect failure becomes one sentence.
"""

from __future__ import annotations

import contextlib
import io
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

from tfctl.inventory.model import Host
from tfctl.remote.connect._paramiko import paramiko
from tfctl.remote.connect.connection import HostConnection, SessionNotOpened
from tfctl.remote.connect.sshconfig import Target, resolve
from tfctl.remote.connect.transport import Result, SshOptions
from tfctl.remote.errors import HostUnreachable


class Link:
    """An open SSH connection to a host (a Fabric Connection), and the jump hosts' before it."""

    def __init__(self, target: Target, connection: HostConnection,
                 hops: list[HostConnection]):
        self.target = target
        self.connection = connection
        self.client: paramiko.SSHClient = connection.client
        self.hops = hops

    @property
    def is_connected(self) -> bool:
        transport = self.client.get_transport()
        return transport is not None and transport.is_active()

    def sftp(self) -> paramiko.SFTPClient:
        """One SFTP session on this connection, opened on first use (the rsync-less fallback;
        Fabric's `Connection.sftp` keeps it)."""
        sftp: paramiko.SFTPClient = self.connection.sftp()
        return sftp

    def run(self, command: str, stdin: str | None, timeout_s: float | None) -> Any:
        """Fabric's `Connection.run`: output captured, never echoed; our own stdin never read
        (an empty stream when none is given, so the command sees EOF at once)."""
        return self.connection.run(command, hide=True, warn=True, pty=False,
                                   in_stream=io.StringIO(stdin or ""), timeout=timeout_s,
                                   encoding="utf-8")

    def close(self) -> None:
        self.connection.close()
        for hop in reversed(self.hops):
            hop.close()


class SshTransport:
    def __init__(self, host: Host, options: SshOptions | None = None):
        self.host = host
        self.options = options or SshOptions()
        self._conn: Link | None = None
        self._lock = threading.Lock()

    # -- connection -------------------------------------------------------------------------
    def connection(self) -> Link:
        with self._lock:
            if self._conn is None or not self._conn.is_connected:
                if self._conn is not None:
                    self._conn.close()
                self._conn = self._connect()
            return self._conn

    def _connect(self) -> Link:
        h = self.host
        target = resolve(h.address, h.user, h.port, h.identity_file, h.jump)
        opened: list[HostConnection] = []
        try:
            conn = self._dial(target, None, opened)
        except BaseException:
            for hop in reversed(opened):
                hop.close()
            raise
        return Link(target, conn, opened[:-1])

    def _dial(self, target: Target, via: HostConnection | None,
              opened: list[HostConnection]) -> HostConnection:
        """Open `target` (through `via`, or through its own jump hosts first), hop by hop."""
        if via is None:
            for hop in target.jumps:
                via = self._dial(hop, via, opened)
        conn = HostConnection(self.host, target, self.options, via)
        opened.append(conn)
        conn.open_checked()
        return conn

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    def drop_link(self) -> None:
        """The host did not answer in time: the next request connects afresh."""
        self.close()

    def sftp(self) -> paramiko.SFTPClient:
        return self.connection().sftp()

    @property
    def paramiko_transport(self) -> paramiko.Transport:
        """The paramiko Transport under the host's Fabric Connection (the tunnel forwards its
        channels on it: Fabric's `forward_local` would hold one thread per tunnel and stop at
        the first broken link, where tfctl's tunnel heals itself)."""
        transport = self.connection().client.get_transport()
        assert transport is not None
        return transport

    # -- commands ---------------------------------------------------------------------------
    def run(self, command: str, stdin: str | None = None, timeout_s: float | None = None
            ) -> Result:
        """One command through Fabric; its exit status, stdout and stderr."""
        from invoke.exceptions import CommandTimedOut, ThreadException

        link = self.connection()
        try:
            try:
                result = link.run(command, stdin, timeout_s)
            except SessionNotOpened:
                # The connection died since it was opened (host rebooted, link cut) and the
                # command never started: reconnect once.
                self.close()
                link = self.connection()
                result = link.run(command, stdin, timeout_s)
        except CommandTimedOut:
            raise HostUnreachable(self.host.name, f"no answer within {timeout_s:.0f} s to "
                                  f"`{command[:60]}`") from None
        except (SessionNotOpened, ThreadException, paramiko.SSHException, EOFError,
                OSError) as exc:
            raise HostUnreachable(self.host.name, f"SSH session lost ({exc})") from None
        code = int(result.exited)
        if code == -1 and not link.is_connected:  # closed under us, not an exit status
            raise HostUnreachable(self.host.name, "the SSH connection dropped mid-command")
        return Result(self.host.name, command, code, result.stdout, result.stderr)

    def stream(self, command: str) -> SshStream:
        """A raw channel, not Fabric's `run`: the caller reads lines as they come and ends the
        command by closing it (telemetry, `logs -f`); `run` returns only at the command's end."""
        channel = self._session()
        channel.exec_command(command)
        channel.shutdown_write()
        return SshStream(channel)

    def open_pipe(self, command: str) -> SshPipe:
        """`command` with stdin left open, stderr merged into stdout: a session to talk to.

        A raw channel: the agent's requests and answers go line by line both ways for as long
        as the session lives, which Fabric's `run` (stdin from a stream, output at the end)
        cannot do."""
        channel = self._session()
        channel.set_combine_stderr(True)
        channel.exec_command(command)
        return SshPipe(channel)

    def relay(self, sock: socket.socket, command: str) -> tuple[int | None, str]:
        """Run `command` with its stdin and stdout joined to `sock` until its output ends.

        How rsync reuses this connection (sync.py): its remote shell is a tiny bridge process
        on the other end of `sock`. Returns the exit status and the command's stderr. A raw
        channel: rsync's protocol is binary, both ways at once, through a socket, where
        Fabric's `run` wants text streams and decodes them.
        """
        channel = self._session()
        channel.exec_command(command)

        def upstream() -> None:
            try:
                while data := sock.recv(65536):
                    channel.sendall(data)
                channel.shutdown_write()
            except (OSError, EOFError, paramiko.SSHException):
                return  # the command ended first; the downstream loop reports how

        pump = threading.Thread(target=upstream, name=f"relay-{self.host.name}", daemon=True)
        pump.start()
        try:
            while data := channel.recv(65536):
                sock.sendall(data)
            code = channel.recv_exit_status()
            err = bytearray()
            while channel.recv_stderr_ready():
                err += channel.recv_stderr(65536)
        finally:
            channel.close()
            with contextlib.suppress(OSError):  # the bridge may be gone already
                sock.shutdown(socket.SHUT_RDWR)
        pump.join(5)
        return code, err.decode(errors="replace")

    def _session(self) -> paramiko.Channel:
        try:
            return self.paramiko_transport.open_session(timeout=self.options.connect_timeout_s)
        except (paramiko.SSHException, EOFError, OSError):
            # The connection died since it was opened (host rebooted, link cut): reconnect once.
            self.close()
            try:
                return self.paramiko_transport.open_session(
                    timeout=self.options.connect_timeout_s)
            except (paramiko.SSHException, EOFError, OSError) as exc:
                raise HostUnreachable(self.host.name, f"SSH session lost ({exc})") from None


class SshStream:
    """Lines of a long-running remote command; closing the channel ends the command."""

    def __init__(self, channel: paramiko.Channel):
        self.channel = channel

    def lines(self) -> Iterator[str]:
        buf = b""
        while True:
            data = self.channel.recv(65536)
            if not data:
                break
            buf += data
            *complete, buf = buf.split(b"\n")
            for line in complete:
                yield line.decode(errors="replace")
        if buf:
            yield buf.decode(errors="replace")

    def close(self) -> None:
        self.channel.close()


class SshPipe:
    """Lines to and from a long-running command on one channel (the agent's session), started
    by this command: it sends the agent its program, and ends the session itself."""

    booted = False
    reused = False

    def __init__(self, channel: paramiko.Channel):
        self.channel = channel
        self._buffer = bytearray()
        self._broken = False

    @property
    def alive(self) -> bool:
        ch = self.channel
        return not (self._broken or ch.closed or ch.eof_received or ch.exit_status_ready())

    @property
    def link_lost(self) -> bool:
        """The SSH connection under this session is gone (closed by a timeout elsewhere, or
        dropped): an ended output then says nothing about the command."""
        return link_lost(self.channel)

    def send(self, data: bytes) -> None:
        try:
            self.channel.sendall(data)
        except (OSError, EOFError, paramiko.SSHException):
            # The command is gone (python missing) or the link broke: reading says which.
            self._broken = True

    def read_line(self, timeout_s: float | None) -> bytes | None:
        """The next line; None once the command's output has ended; TimeoutError if none
        arrives within `timeout_s`."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while True:
            end = self._buffer.find(b"\n")
            if end >= 0:
                line = bytes(self._buffer[:end + 1])
                del self._buffer[:end + 1]
                return line
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise TimeoutError
            self.channel.settimeout(left)
            data = self.channel.recv(65536)  # TimeoutError (socket.timeout) when none came
            if not data:
                line, self._buffer = bytes(self._buffer), bytearray()
                return line or None
            self._buffer += data

    def end_input(self) -> None:
        """EOF on the command's stdin (the agent exits when its requests end)."""
        try:
            self.channel.shutdown_write()
        except (OSError, EOFError, paramiko.SSHException):
            self._broken = True

    def finish(self, wait_s: float = 5.0) -> tuple[int | None, str]:
        """After the output ended: the exit status (None if it never came) and unread output."""
        deadline = time.monotonic() + wait_s
        while not self.channel.exit_status_ready() and time.monotonic() < deadline:
            time.sleep(0.01)
        code = self.channel.recv_exit_status() if self.channel.exit_status_ready() else None
        rest = bytes(self._buffer).decode(errors="replace")
        self.close()
        return code, rest

    def release(self, owed: int) -> bool:
        return False  # this command's own: `end_input` and `finish` end it

    def close(self) -> None:
        self._broken = True
        self.channel.close()


def link_lost(channel: paramiko.Channel) -> bool:
    """The connection a channel ran on is closed. paramiko's `Channel.recv_exit_status` then
    says -1 ("if no exit status is provided by the server, -1 is returned", its docs)."""
    transport = channel.get_transport()
    return transport is None or not transport.is_active()
