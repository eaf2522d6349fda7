"""A local port forwarded to a port on a host's loopback: `ssh -L 6006:localhost:6006`, kept up.

TensorBoard has no authentication, so it listens on the host's 127.0.0.1 only and is reached
through SSH (docs/field-notes.md §1). A `Tunnel` listens on this machine's 127.0.0.1 (never another
address), the requested port or the next free one (`port_note` says which), and forwards each
accepted connection as a `direct-tcpip` channel over the host's SSH connection — the inventory's
settings through `SshTransport`, so host keys are verified and a jump host is honoured. For a
`transport: local` host it connects straight to 127.0.0.1:<port>.

It outlives the SSH connection: a monitor thread probes the connection every `keepalive_s`
(a `keepalive@openssh.com` request that must be answered within `dead_after_s`, which also finds
a link that silently drops packets) and reconnects with backoff; a connection accepted while
the link is down reconnects first. The listener stays open throughout, so the URL never changes.
Blocking, thread-based and UI-free: `tfctl tensorboard` and the dashboard share it.

Why the paramiko Transport under the host's Fabric Connection (`SshTransport.paramiko_transport`)
and not Fabric's `Connection.forward_local`: that is a context manager whose forwarding ends
with its block and with the first broken link, where this tunnel must outlive both, probing
the link and reconnecting behind a listener that never moves.
"""

from __future__ import annotations

import contextlib
import errno
import select
import socket
import threading
import time
from collections.abc import Callable
from typing import Literal, Protocol

from tfctl.remote.connect._paramiko import paramiko
from tfctl.remote.connect.fleet import Fleet
from tfctl.remote.connect.transport import Transport
from tfctl.remote.errors import RemoteError

DEFAULT_LOCAL_PORT = 6006
PORT_SEARCH = 100  # after the requested port, how many following ones to try
LOOPBACK = "127.0.0.1"
BUFFER_BYTES = 65536
TunnelState = Literal["closed", "connecting", "up", "reconnecting"]
TransportFactory = Callable[[str], Transport]
Say = Callable[[str], None]


class TunnelError(RemoteError):
    """The tunnel cannot listen or reach its target (one sentence, as every RemoteError)."""

    def __init__(self, host: str, what: str, detail: str = ""):
        super().__init__(host, what, detail, kind="tunnel")


class _End(Protocol):
    """One side of a forwarded connection: a socket or a paramiko channel."""

    def recv(self, size: int) -> bytes: ...

    def sendall(self, data: bytes) -> None: ...

    def fileno(self) -> int: ...

    def close(self) -> None: ...


def bind_loopback(preferred: int, search: int = PORT_SEARCH) -> socket.socket:
    """A listening socket on 127.0.0.1:`preferred`, or the next free port after it.

    Raises TunnelError if none of `preferred`..`preferred + search` is free (a port held on any
    address, 0.0.0.0 included, counts as taken: Linux refuses the bind)."""
    last: OSError | None = None
    for port in range(preferred, min(preferred + search, 65535) + 1):
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # ignore our own TIME-WAITs
        try:
            sock.bind((LOOPBACK, port))
            sock.listen(64)
        except OSError as exc:
            sock.close()
            if exc.errno not in (errno.EADDRINUSE, errno.EACCES):
                raise
            last = exc
            continue
        return sock
    raise TunnelError("local", f"no free local port in {preferred}..{preferred + search} "
                      f"({last.strerror if last else 'none tried'}): pass another --port")


class Tunnel:
    """Forward 127.0.0.1:`local_port` here to `remote_host`:`remote_port` on `host`.

    `transports` is a Fleet (its shared connection to `host` is used) or any callable giving
    the `Transport` for a host name. `open()` returns the URL once the listener is up (and, for
    SSH, once the host is connected: a refused key or login raises there); `close()` stops it;
    it can be opened again. `state` is "closed" | "connecting" | "up" | "reconnecting".
    """

    def __init__(self, transports: Fleet | TransportFactory, host: str, remote_port: int,
                 local_port: int | None = None, *, remote_host: str = LOOPBACK,
                 say: Say | None = None, keepalive_s: float = 5.0, dead_after_s: float = 10.0,
                 channel_timeout_s: float = 10.0, retry_max_s: float = 10.0):
        self._transport_of: TransportFactory = (
            transports.transport if isinstance(transports, Fleet) else transports)
        self.host = host
        self.remote_host = remote_host
        self.remote_port = remote_port
        self.requested_port = DEFAULT_LOCAL_PORT if local_port is None else local_port
        self.local_port: int | None = None
        self.state: TunnelState = "closed"
        self.last_error: str | None = None
        self.reconnects = 0
        self.keepalive_s = keepalive_s
        self.dead_after_s = dead_after_s
        self.channel_timeout_s = channel_timeout_s
        self.retry_max_s = retry_max_s
        self._say = say or (lambda _text: None)
        self._listener: socket.socket | None = None
        self._link: paramiko.Transport | None = None
        self._link_lock = threading.RLock()
        self._cached: Transport | None = None
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._open_ends: set[_End | socket.socket] = set()
        self._ends_lock = threading.Lock()

    # -- public ---------------------------------------------------------------------------------
    @property
    def url(self) -> str | None:
        return None if self.local_port is None else f"http://{LOOPBACK}:{self.local_port}/"

    @property
    def port_note(self) -> str | None:
        """A sentence when the tunnel does not listen on the port asked for, else None."""
        if self.local_port is None or self.local_port == self.requested_port:
            return None
        return (f"local port {self.requested_port} is taken, so the tunnel listens on "
                f"{self.local_port}")

    @property
    def is_local(self) -> bool:
        return self._transport().host.transport == "local"

    def open(self) -> str:
        if self._listener is not None:
            assert self.url is not None
            return self.url
        listener = bind_loopback(self.requested_port)
        self.local_port = listener.getsockname()[1]
        self._stop.clear()
        self.state = "connecting"
        try:
            if not self.is_local:
                self._ssh_link()  # fail now, not on the first browser request
        except BaseException:
            listener.close()
            self.state, self.local_port = "closed", None
            raise
        self._listener = listener
        self.state = "up"
        self._spawn(self._accept_loop, "tunnel-accept")
        if not self.is_local:
            self._spawn(self._monitor_loop, "tunnel-monitor")
        assert self.url is not None
        return self.url

    def close(self) -> None:
        """Stop listening and end every forwarded connection (the SSH connection is the fleet's
        and stays open)."""
        self._stop.set()
        listener, self._listener = self._listener, None
        if listener is not None:
            listener.close()
        with self._ends_lock:
            ends, self._open_ends = list(self._open_ends), set()
        for end in ends:
            _quietly_close(end)
        for thread in self._threads:
            if thread is not threading.current_thread():
                thread.join(timeout=5.0)
        self._threads = []
        self.state, self.local_port = "closed", None

    def probe(self) -> str | None:
        """None if something accepts connections at the target now, else why not (a sentence)."""
        try:
            end = self._connect_target(("127.0.0.1", 0))
        except RemoteError as exc:
            return str(exc.what)
        _quietly_close(end)
        return None

    def __enter__(self) -> Tunnel:
        self.open()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the SSH link ---------------------------------------------------------------------------
    def _transport(self) -> Transport:
        # Asked once: a factory that builds a new transport per call must not cost a connection
        # per forwarded request (and SshTransport reconnects by itself when it must).
        if self._cached is None:
            self._cached = self._transport_of(self.host)
        return self._cached

    def _ssh_link(self) -> paramiko.Transport:
        """The host's live paramiko transport, connecting (again) if it is gone."""
        with self._link_lock:
            if self._link is not None:
                if self._link.is_active():
                    return self._link
                self._drop_link("connection closed")
            transport = self._transport()
            # SshTransport reconnects by itself when its connection is no longer active.
            link = transport.paramiko_transport
            if link is None:
                raise TunnelError(self.host, f"its {type(transport).__name__} cannot forward "
                                  "ports (needs an SSH transport)")
            link.set_keepalive(max(1, round(self.keepalive_s)))
            self._link = link
            if self.state == "reconnecting":
                self.reconnects += 1
                self.state = "up"
                self.last_error = None
                self._say(f"reconnected to {self.host}: {self.url} answers again")
            return link

    def _drop_link(self, why: str) -> None:
        """Close a dead or silent connection, so that its next use (ours, or another user's of
        the same fleet transport) connects afresh instead of writing into a silent link."""
        with self._link_lock:
            link, self._link = self._link, None
            if self.state == "up":
                self.state = "reconnecting"
                self._say(f"SSH connection to {self.host} lost ({why}); reconnecting")
            self.last_error = why
            if link is not None:
                link.close()

    def _alive(self, link: paramiko.Transport) -> bool:
        """Whether the host answers a keepalive request within `dead_after_s`."""
        answered = threading.Event()

        def ask() -> None:
            try:
                link.global_request("keepalive@openssh.com", wait=True)  # sshd answers "failure"
            except (paramiko.SSHException, EOFError, OSError):
                return  # no answer: `answered` stays unset
            answered.set()

        threading.Thread(target=ask, name="tunnel-keepalive", daemon=True).start()
        deadline = time.monotonic() + self.dead_after_s
        while not answered.wait(0.2):  # wake up for close() too
            if self._stop.is_set() or time.monotonic() > deadline or not link.is_active():
                return False
        return link.is_active()

    def _monitor_loop(self) -> None:
        backoff = 1.0
        while not self._stop.wait(self.keepalive_s if self.state == "up" else backoff):
            link = self._link
            if link is not None and link.is_active():
                if self._alive(link) or self._stop.is_set():
                    continue
                self._drop_link(f"no answer within {self.dead_after_s:g} s")
            try:
                self._ssh_link()
                backoff = 1.0
            except RemoteError as exc:
                self.state = "reconnecting"
                if exc.what != self.last_error:
                    self._say(f"{self.host}: not reachable yet ({exc.what}); retrying")
                self.last_error = exc.what
                backoff = min(self.retry_max_s, backoff * 2)

    # -- forwarding -----------------------------------------------------------------------------
    def _connect_target(self, src: tuple[str, int]) -> _End | socket.socket:
        target = (self.remote_host, self.remote_port)
        where = f"{self.host}:{self.remote_host}:{self.remote_port}"
        if self.is_local:
            try:
                return socket.create_connection(target, timeout=self.channel_timeout_s)
            except OSError as exc:
                raise TunnelError(self.host, f"{where} does not answer "
                                  f"({exc.strerror or exc})") from None
        for attempt in (1, 2):
            link = self._ssh_link()
            try:
                channel = link.open_channel("direct-tcpip", target, src,
                                            timeout=self.channel_timeout_s)
            except paramiko.ChannelException as exc:  # sshd could not connect: nothing listens
                raise TunnelError(self.host, f"{where} refused the connection ({exc.text}): "
                                  "is TensorBoard running there?") from None
            except (paramiko.SSHException, EOFError, OSError) as exc:
                why = str(exc) or type(exc).__name__
                self._drop_link(f"channel failed: {why}")
                if attempt == 2:
                    raise TunnelError(self.host, f"SSH connection lost ({why})") from None
                continue
            return channel
        raise AssertionError("unreachable")

    def _accept_loop(self) -> None:
        listener = self._listener
        assert listener is not None
        while not self._stop.is_set():
            try:
                ready, _, _ = select.select([listener], [], [], 0.5)
                if not ready:
                    continue
                client, src = listener.accept()
            except (OSError, ValueError):  # closed by close()
                return
            thread = threading.Thread(target=self._forward, args=(client, src),
                                      name="tunnel-conn", daemon=True)
            thread.start()

    def _forward(self, client: socket.socket, src: tuple[str, int]) -> None:
        self._track(client)
        try:
            try:
                upstream = self._connect_target(src)
            except RemoteError as exc:
                if exc.what != self.last_error:
                    self._say(f"tunnel: {exc}")
                self.last_error = exc.what
                return
            self._track(upstream)
            try:
                pump(client, upstream, self._stop)
            finally:
                self._untrack(upstream)
        finally:
            self._untrack(client)

    def _spawn(self, target: Callable[[], None], name: str) -> None:
        thread = threading.Thread(target=target, name=name, daemon=True)
        self._threads.append(thread)
        thread.start()

    def _track(self, end: _End | socket.socket) -> None:
        with self._ends_lock:
            self._open_ends.add(end)

    def _untrack(self, end: _End | socket.socket) -> None:
        with self._ends_lock:
            self._open_ends.discard(end)
        _quietly_close(end)


def pump(a: _End | socket.socket, b: _End | socket.socket, stop: threading.Event) -> None:
    """Copy bytes both ways until both directions ended (half-closes passed on) or `stop`."""
    reading = {a: b, b: a}
    while reading and not stop.is_set():
        try:
            ready, _, _ = select.select(list(reading), [], [], 0.5)
            for end in ready:
                data = end.recv(BUFFER_BYTES)
                peer = reading[end]
                if data:
                    peer.sendall(data)
                    continue
                del reading[end]  # EOF from `end`: tell its peer nothing more comes
                _shut_write(peer)
        except (OSError, EOFError, ValueError, paramiko.SSHException):
            return  # either side died (reset, channel closed, transport gone)


def _shut_write(end: _End | socket.socket) -> None:
    with contextlib.suppress(OSError, EOFError, paramiko.SSHException):
        if isinstance(end, socket.socket):
            end.shutdown(socket.SHUT_WR)
        elif isinstance(end, paramiko.Channel):
            end.shutdown_write()


def _quietly_close(end: _End | socket.socket) -> None:
    with contextlib.suppress(OSError, EOFError, paramiko.SSHException):
        end.close()
