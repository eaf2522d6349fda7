"""A command's side of the holder: agent sessions borrowed, everything else its own.

`HeldTransport` is what `Fleet` gives each SSH host when the command keeps connections
(`SshOptions.persist_s > 0`, the CLI's `--persist`). Its agent sessions (`open_pipe`, what
`up`, `status` and `down` use) come from the holder: a frame to a local socket and a ready
agent, with no handshake, no interpreter start, and no paramiko import in the command. The
first command that finds no holder starts one (`start_holder`) and borrows from it at once, so
the connections and sessions it opens are the holder's from the start and stay open, idle,
when it ends: the next command, typed right after, finds them ready instead of waiting while a
holder opens them again. Anything else (a shell command, a stream, rsync's relay, a tunnel,
`tfctl ssh`), an agent session the holder has no room for, and every agent session where no
holder can be started go over the command's own connection (`ssh.SshTransport`), opened on
first use.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import threading
import time
from typing import TYPE_CHECKING

from tfctl.inventory.model import Host
from tfctl.remote.connect.hold import protocol
from tfctl.remote.connect.transport import Result, SshOptions

if TYPE_CHECKING:
    import paramiko

    from tfctl.remote.connect.ssh import SshPipe, SshStream, SshTransport

_HOLDER_SLACK_S = 30.0
"""How much longer than a read's own timeout the command waits on the holder before it
counts the holder as gone."""
_started: list[subprocess.Popen[bytes]] = []
"""Holders this process started (kept referenced: it does not wait for them)."""
_path_lock = threading.Lock()
_path: list[str] = []
_start_lock = threading.Lock()
_OTHER_STARTING_S = 0.5
"""How long a command waits for a holder another command is starting (it holds the lock and
binds the socket at once) before it connects by itself."""


def _socket() -> str:
    with _path_lock:
        if not _path:
            _path.append(str(protocol.socket_path()))
        return _path[0]


def _dial(timeout_s: float) -> socket.socket | None:
    """A connection to the running holder, or None when none answers."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout_s)
    try:
        sock.connect(_socket())
    except OSError:
        sock.close()
        return None
    return sock


class HeldPipe:
    """An agent session lent by the holder (`agentclient.Pipe`), booted: the holder sent the
    agent its program when it started the session."""

    booted = True

    def __init__(self, sock: socket.socket, reused: bool):
        self.sock = sock
        self.reused = reused
        self.link_lost = False
        self._ended = False

    @property
    def alive(self) -> bool:
        return not self._ended

    def send(self, data: bytes) -> None:
        try:
            protocol.send_frame(self.sock, protocol.SEND, data)
        except OSError:
            self._gone()

    def read_line(self, timeout_s: float | None) -> bytes | None:
        try:
            self.sock.settimeout(None if timeout_s is None else timeout_s + _HOLDER_SLACK_S)
            protocol.send_json(self.sock, protocol.READ, {"timeout_s": timeout_s})
            kind, data = protocol.recv_frame(self.sock)
        except (OSError, EOFError):
            self._gone()
            return None
        if kind == protocol.TIMEOUT:
            raise TimeoutError
        if kind == protocol.LINE:
            return data
        self._ended = True
        self.link_lost = bool(json.loads(data or b"{}").get("link_lost"))
        return None

    def end_input(self) -> None:
        try:
            protocol.send_frame(self.sock, protocol.INPUT_END)
        except OSError:
            self._gone()

    def finish(self, wait_s: float = 5.0) -> tuple[int | None, str]:
        try:
            self.sock.settimeout(wait_s + _HOLDER_SLACK_S)
            protocol.send_json(self.sock, protocol.FINISH, {"wait_s": wait_s})
            kind, data = protocol.recv_frame(self.sock)
        except (OSError, EOFError):
            self._gone()
            return None, ""
        finally:
            self._ended = True
        answer = json.loads(data) if kind == protocol.EXITED else {}
        self.link_lost = bool(answer.get("link_lost"))
        self.close()
        return answer.get("code"), str(answer.get("rest", ""))

    def release(self, owed: int) -> bool:
        """Hand the session back between two requests (`owed` answers to posted requests still
        to come, which the holder reads and drops)."""
        with contextlib.suppress(OSError):
            protocol.send_json(self.sock, protocol.RELEASE, {"owed": owed})
        self.close()
        return True

    def close(self) -> None:
        self._ended = True
        self.sock.close()

    def _gone(self) -> None:
        """The holder went away mid-session: for this command, as if the link was lost."""
        self._ended = True
        self.link_lost = True


def start_holder(persist_s: float) -> bool:
    """Start a holder unless one answers (bound here and handed to it, see holder.py: it
    answers from the moment this returns); False where none runs and none can start (no
    socket can be made, or one is ending). Without waiting for it: a command calls this as it
    opens its fleet, so the holder's start overlaps the command's own before its first
    request. One start per process."""
    with _start_lock:
        running = _dial(1.0)
        if running is not None:
            running.close()
            return True
        try:
            path = _socket()
            bound = protocol.bind(path)
        except OSError:
            return False
        if bound is None:  # another command's holder is starting (or one is ending)
            return True
        server, lock = bound
        try:  # its own session: a Ctrl-C in this terminal later is not for it
            log = os.open(path + ".log", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            try:
                _started.append(subprocess.Popen(
                    [sys.executable, "-m", "tfctl.remote.connect.hold.holder", path,
                     str(persist_s), str(lock), str(server.fileno()), str(os.getpid())],
                    stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log,
                    start_new_session=True, close_fds=True, pass_fds=(lock, server.fileno())))
            finally:
                os.close(log)
        except OSError:
            return False
        finally:  # the holder has its own copies (the lock stays held through them)
            server.close()
            os.close(lock)
        return True


def _holder(persist_s: float, timeout_s: float) -> socket.socket | None:
    """A connection to the holder, started if none answers; None when there is none."""
    sock = _dial(timeout_s)
    if sock is None and start_holder(persist_s):
        deadline = time.monotonic() + _OTHER_STARTING_S
        while (sock := _dial(timeout_s)) is None and time.monotonic() < deadline:
            time.sleep(0.01)
    return sock


class HeldTransport:
    """A host's transport for a command that keeps its connections (see the module)."""

    def __init__(self, host: Host, options: SshOptions):
        self.host = host
        self.options = options
        self._own: SshTransport | None = None
        self._lock = threading.Lock()

    def own(self) -> SshTransport:
        """The command's own connection to the host (opened on first use)."""
        with self._lock:
            if self._own is None:
                from tfctl.remote.connect.ssh import SshTransport

                self._own = SshTransport(self.host, self.options)
            return self._own

    def open_pipe(self, command: str) -> HeldPipe | SshPipe:
        held = self._borrow(command)
        if held is not None:
            return held
        return self.own().open_pipe(command)

    def _borrow(self, command: str) -> HeldPipe | None:
        sock = _holder(self.options.persist_s, self.options.connect_timeout_s)
        if sock is None:
            return None
        try:
            sock.settimeout(self.options.connect_timeout_s + _HOLDER_SLACK_S)
            asked = dict(protocol.link_fields(self.host, self.options), command=command)
            protocol.send_json(sock, protocol.OPEN, asked)
            kind, data = protocol.recv_frame(sock)
        except (OSError, EOFError):  # the holder is ending: connect by ourselves
            sock.close()
            return None
        answer = json.loads(data)
        if kind == protocol.ERROR:
            sock.close()
            raise protocol.error_from(answer["error"])
        if kind != protocol.READY:
            sock.close()
            return None
        return HeldPipe(sock, bool(answer.get("reused")))

    def drop_link(self) -> None:
        """The host did not answer in time: the next request connects afresh, here and in the
        holder."""
        self.close()
        sock = _dial(1.0)
        if sock is not None:
            with contextlib.suppress(OSError):
                protocol.send_json(sock, protocol.DROP,
                                   protocol.link_fields(self.host, self.options))
            sock.close()

    # -- everything else: the command's own connection ---------------------------------------
    def run(self, command: str, stdin: str | None = None, timeout_s: float | None = None
            ) -> Result:
        return self.own().run(command, stdin, timeout_s)

    def stream(self, command: str) -> SshStream:
        return self.own().stream(command)

    def relay(self, sock: socket.socket, command: str) -> tuple[int | None, str]:
        return self.own().relay(sock, command)

    @property
    def paramiko_transport(self) -> paramiko.Transport:
        return self.own().paramiko_transport

    def sftp(self) -> paramiko.SFTPClient:
        return self.own().sftp()

    def close(self) -> None:
        with self._lock:
            own, self._own = self._own, None
        if own is not None:
            own.close()


def stop_holder(wait_s: float = 5.0) -> dict[str, int] | None:
    """End the running holder now (`tfctl disconnect`, as `ssh -O exit`): what it held (pid,
    connections, idle agent sessions), once it has ended its sessions and exited (waited for up
    to `wait_s`); None when none was running."""
    sock = _dial(1.0)
    if sock is None:
        return None
    try:
        sock.settimeout(wait_s)
        protocol.send_json(sock, protocol.STOP, {})
        kind, data = protocol.recv_frame(sock)
    except (OSError, EOFError):
        return None
    finally:
        sock.close()
    held = {k: int(v) for k, v in (json.loads(data) if kind == protocol.READY else {}).items()}
    deadline = time.monotonic() + wait_s
    while held.get("pid") and time.monotonic() < deadline:
        try:
            os.kill(held["pid"], 0)  # it exits once its sessions have ended
        except ProcessLookupError:
            break
        time.sleep(0.05)
    return held
