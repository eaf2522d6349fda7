"""SSH transport over paramiko: one connection per host per command, verified host keys.

`sshconfig.resolve` reads the user's ~/.ssh/config (aliases, User, Port, IdentityFile,
ProxyJump, ProxyCommand) as Fabric's `Connection` did, without Fabric's and invoke's imports
(~50 ms of every command's start); jump hosts are reached through a `direct-tcpip` channel of
the previous hop's connection. Host keys are verified by tfctl's own policy (hostkeys.py), and
every connect failure becomes one sentence. Commands run on raw paramiko channels (exec + stdin
+ exit status), which is all we need.
"""

from __future__ import annotations

import contextlib
import errno
import os
import select
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

from tfctl.inventory.model import Host
from tfctl.remote.connect._paramiko import paramiko
from tfctl.remote.connect.hostkeys import (
    VerifyingPolicy,
    certificates_first,
    changed_key_error,
    known_hosts_name,
    read_known_hosts,
    refuse_revoked,
)
from tfctl.remote.connect.sshconfig import Target, resolve
from tfctl.remote.connect.transport import Result, SshOptions
from tfctl.remote.errors import AuthRefused, HostKeyRefused, HostUnreachable, RemoteError


class Link:
    """An open SSH connection to a host, and the jump-host connections it goes through."""

    def __init__(self, target: Target, client: paramiko.SSHClient,
                 hops: list[paramiko.SSHClient]):
        self.target = target
        self.client = client
        self.hops = hops
        self._sftp: paramiko.SFTPClient | None = None

    @property
    def is_connected(self) -> bool:
        transport = self.client.get_transport()
        return transport is not None and transport.is_active()

    def sftp(self) -> paramiko.SFTPClient:
        """One SFTP session on this connection, opened on first use (the rsync-less fallback)."""
        if self._sftp is None:
            self._sftp = self.client.open_sftp()
        return self._sftp

    def close(self) -> None:
        if self._sftp is not None:
            self._sftp.close()
        self.client.close()
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
                self._conn = self._connect()
            return self._conn

    def _connect(self) -> Link:
        h = self.host
        target = resolve(h.address, h.user, h.port, h.identity_file, h.jump)
        opened: list[paramiko.SSHClient] = []
        try:
            client = self._dial(target, None, opened)
        except BaseException:
            for hop in reversed(opened):
                hop.close()
            raise
        return Link(target, client, opened[:-1])

    def _dial(self, target: Target, via: paramiko.SSHClient | None,
              opened: list[paramiko.SSHClient]) -> paramiko.SSHClient:
        """Connect to `target` (through `via`, or through its own jump hosts first)."""
        if via is None:
            for hop in target.jumps:
                via = self._dial(hop, via, opened)
        timeout = max(1, round(self.options.connect_timeout_s))
        sock: Any = None
        try:
            if via is not None:
                link = via.get_transport()
                assert link is not None
                sock = link.open_channel("direct-tcpip", (target.hostname, target.port),
                                         ("127.0.0.1", 0), timeout=timeout)
            elif target.proxy_command:
                sock = paramiko.ProxyCommand(target.proxy_command)
            else:
                sock = _tcp_connect(target.hostname, target.port, timeout)
        except BaseException as exc:
            raise classify_connect_error(self.host, target, self.options, exc) from None
        client = paramiko.SSHClient()
        opened.append(client)
        known = os.path.expanduser(self.host.known_hosts)
        files = (known, *target.known_hosts_files)
        book = read_known_hosts(files)
        name = target.host_key_alias or known_hosts_name(target.hostname, target.port)
        plain = [k for k in book if not k.marker and k.matches(name)]
        cas = [k for k in book if k.marker == "@cert-authority" and k.matches(name)]
        for entry in plain:  # under the name paramiko looks up; it compares them itself
            if (pkey := entry.pkey()) is not None:
                client.get_host_keys().add(known_hosts_name(target.hostname, target.port),
                                           entry.key_type, pkey)
        client.set_missing_host_key_policy(VerifyingPolicy(
            self.host.name, known, self.options.accept_new_host_keys, name, cas, files))
        keys: Any = list(target.key_filenames) or None  # paramiko takes a list of files too
        try:
            client.connect(target.hostname, target.port, target.user, timeout=timeout,
                           key_filename=keys, look_for_keys=target.look_for_keys, sock=sock,
                           allow_agent=target.allow_agent,
                           transport_factory=certificates_first if cas and not plain else None)
            refuse_revoked(self.host.name, client, book, name)
        except paramiko.BadHostKeyException as exc:
            where = next((k for k in plain if k.blob == exc.expected_key.asbytes()), None)
            raise changed_key_error(self.host.name, where.path if where else known, name,
                                    exc) from None
        except RemoteError:
            raise
        except BaseException as exc:
            raise classify_connect_error(self.host, target, self.options, exc) from None
        return client

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    @property
    def paramiko_transport(self) -> paramiko.Transport:
        transport = self.connection().client.get_transport()
        assert transport is not None
        return transport

    # -- commands ---------------------------------------------------------------------------
    def run(self, command: str, stdin: str | None = None, timeout_s: float | None = None
            ) -> Result:
        channel = self._session()
        try:
            channel.exec_command(command)
            if stdin is not None:
                channel.sendall(stdin.encode())
            channel.shutdown_write()
            out, err = _drain(channel, timeout_s, self.host.name, command)
            code = channel.recv_exit_status()
            if code == -1 and link_lost(channel):  # closed under us, not an exit status
                raise HostUnreachable(self.host.name, "the SSH connection dropped mid-command")
        finally:
            channel.close()
        return Result(self.host.name, command, code, out, err)

    def stream(self, command: str) -> SshStream:
        channel = self._session()
        channel.exec_command(command)
        channel.shutdown_write()
        return SshStream(channel)

    def open_pipe(self, command: str) -> SshPipe:
        """`command` with stdin left open, stderr merged into stdout: a session to talk to."""
        channel = self._session()
        channel.set_combine_stderr(True)
        channel.exec_command(command)
        return SshPipe(channel)

    def relay(self, sock: socket.socket, command: str) -> tuple[int | None, str]:
        """Run `command` with its stdin and stdout joined to `sock` until its output ends.

        How rsync reuses this connection (sync.py): its remote shell is a tiny bridge process
        on the other end of `sock`. Returns the exit status and the command's stderr.
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
    """Lines to and from a long-running command on one channel (the agent's session)."""

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

    def close(self) -> None:
        self._broken = True
        self.channel.close()


def link_lost(channel: paramiko.Channel) -> bool:
    """The connection a channel ran on is closed. paramiko's `Channel.recv_exit_status` then
    says -1 ("if no exit status is provided by the server, -1 is returned", its docs)."""
    transport = channel.get_transport()
    return transport is None or not transport.is_active()


def _tcp_connect(hostname: str, port: int, timeout_s: float) -> socket.socket:
    """A TCP connection to the host's SSH port, tried on each of its addresses as paramiko does.

    The name goes to the resolver as bytes: given a str, Python encodes every name with the
    `idna` codec, whose import (stringprep, unicodedata) costs ~13 ms of each command's start.
    """
    name = hostname.encode("ascii") if hostname.isascii() else hostname.encode("idna")
    return socket.create_connection((name, port), timeout=timeout_s)  # type: ignore[arg-type]


def _drain(channel: paramiko.Channel, timeout_s: float | None, host: str,
           command: str) -> tuple[str, str]:
    out, err = bytearray(), bytearray()
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    while True:
        if channel.recv_ready():
            out += channel.recv(65536)
            continue
        if channel.recv_stderr_ready():
            err += channel.recv_stderr(65536)
            continue
        if channel.exit_status_ready() and not channel.recv_ready() \
                and not channel.recv_stderr_ready():
            break
        if channel.closed and channel.eof_received:
            break
        if deadline is not None and time.monotonic() > deadline:
            raise HostUnreachable(host, f"no answer within {timeout_s:.0f} s to `{command[:60]}`")
        select.select([channel], [], [], 0.2)
    return out.decode(errors="replace"), err.decode(errors="replace")


def classify_connect_error(host: Host, target: Target, options: SshOptions,
                           exc: BaseException) -> RemoteError:
    where = target.where
    timeout = options.connect_timeout_s
    if isinstance(exc, HostKeyRefused):
        return exc
    if isinstance(exc, paramiko.AuthenticationException):
        key = host.identity_file or "your default keys / agent"
        return AuthRefused(host.name, f"{where} refused the login of user "
                           f"{target.user!r} with {key}",
                           "check `user:` and `identity_file:` and that the public key is in "
                           "the host's ~/.ssh/authorized_keys")
    if isinstance(exc, socket.timeout | TimeoutError):
        return HostUnreachable(host.name, f"{where} unreachable: no answer within {timeout:g} s")
    if isinstance(exc, paramiko.ssh_exception.NoValidConnectionsError | ConnectionRefusedError):
        return HostUnreachable(host.name, f"{where} refused the connection (is sshd running?)")
    if isinstance(exc, socket.gaierror):
        return HostUnreachable(host.name, f"{target.hostname!r} does not resolve to an address "
                               "(check `address:` or your ~/.ssh/config)")
    if isinstance(exc, OSError) and exc.errno in (errno.EHOSTUNREACH, errno.ENETUNREACH):
        return HostUnreachable(host.name, f"{where} unreachable ({os.strerror(exc.errno)})")
    if isinstance(exc, paramiko.SSHException | EOFError | OSError):
        return HostUnreachable(host.name, f"{where}: SSH failed ({exc or type(exc).__name__})")
    if isinstance(exc, KeyboardInterrupt):
        raise exc
    return RemoteError(host.name, f"{where}: cannot connect ({type(exc).__name__}: {exc})")
