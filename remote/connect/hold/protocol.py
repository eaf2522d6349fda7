"""Where the holder listens and what the two sides say to each other.

Frames, both ways: one byte of kind, four bytes of length (big-endian), the payload. A command
asks for one agent session per Unix connection; the holder answers each request frame with one
frame, so nothing is in flight that the command did not ask for and a session handed back
(`RELEASE`) is exactly between two requests.

command → holder                         holder → command
  OPEN   {host, options, command}          READY {reused} | ERROR {error} | BUSY (no room:
                                            the command connects by itself)
  SEND   bytes for the agent's stdin        (nothing)
  READ   {timeout_s}                        LINE bytes | TIMEOUT | ENDED
  FINISH {wait_s}                           EXITED {code, rest}
  INPUT_END                                 (nothing)
  RELEASE {owed}: the session goes back to the holder's idle pool (after `owed` answers to
          posted requests are read and dropped); closing the socket without it ends the
          session on the host
  DROP   {host, options}: the host's link is dead (a request got no answer): close it
  STOP   {}: end now (`tfctl disconnect`)      READY {pid, links, sessions}
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import json
import os
import socket
import struct
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

from tfctl.inventory.model import Host
from tfctl.remote.connect.transport import SshOptions
from tfctl.remote.errors import AuthRefused, HostKeyRefused, HostUnreachable, RemoteError

OPEN, SEND, READ, FINISH, INPUT_END, RELEASE, DROP, STOP = (
    b"o", b"s", b"r", b"f", b"i", b"p", b"d", b"x")
READY, ERROR, LINE, TIMEOUT, ENDED, EXITED, BUSY = (b"R", b"E", b"L", b"T", b"N", b"X", b"B")
_HEAD = struct.Struct(">cI")
PROTOCOL = 1

# What a connection is kept under: the host's SSH settings (not its tasks or workdir) and the
# options that decide how its key is judged.
_LINK_FIELDS = ("name", "address", "user", "port", "identity_file", "known_hosts", "jump")


def runtime_dir() -> Path:
    """The user's own folder for the socket (mode 0700): $XDG_RUNTIME_DIR/tfctl where there is
    one (a tmpfs only this user reads), else ~/.cache/tfctl/hold."""
    base = os.environ.get("XDG_RUNTIME_DIR")
    folder = Path(base) / "tfctl" if base else Path(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")) / "tfctl" / "hold"
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.chmod(folder, 0o700)
    return folder


def code_digest() -> str:
    """This tfctl's connecting code and agent, by file size and mtime (a few stats): a holder
    started by another version has another socket, so it is never asked."""
    from tfctl.remote.connect.session.agentclient import payload

    here = Path(__file__).resolve().parent.parent
    parts = [str(PROTOCOL), sys.executable, payload().file_name]
    for folder in (here, here / "hold"):
        for path in sorted(folder.glob("*.py")):
            st = path.stat()
            parts.append(f"{path.name}:{st.st_size}:{st.st_mtime_ns}")
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


def socket_path() -> Path:
    return runtime_dir() / f"{code_digest()}.sock"


def bind(path: str) -> tuple[socket.socket, int] | None:
    """The holder's socket, bound at `path` and listening, and the lock (a file descriptor)
    that makes its holder the only one; None when another holder has the lock (it is starting,
    running or ending).

    The command that starts a holder binds it (as systemd's socket activation does) and hands
    both to the holder: its own connections queue in the socket's backlog while the holder
    starts, with no waiting for it to listen and no retries."""
    lock = os.open(path + ".lock", os.O_CREAT | os.O_RDWR, 0o600)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(lock)
        return None
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)  # a holder that died left it: nobody answers there (we hold the lock)
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old = os.umask(0o177)
    try:
        server.bind(path)
    except OSError:
        server.close()
        os.close(lock)
        raise
    finally:
        os.umask(old)
    server.listen(64)
    return server, lock


def send_frame(sock: socket.socket, kind: bytes, payload: bytes = b"") -> None:
    sock.sendall(_HEAD.pack(kind, len(payload)) + payload)


def send_json(sock: socket.socket, kind: bytes, value: dict[str, Any]) -> None:
    send_frame(sock, kind, json.dumps(value).encode())


def recv_frame(sock: socket.socket) -> tuple[bytes, bytes]:
    """The next frame; EOFError when the other side has closed."""
    kind, size = _HEAD.unpack(_recv_exactly(sock, _HEAD.size))
    return kind, _recv_exactly(sock, size)


def _recv_exactly(sock: socket.socket, size: int) -> bytes:
    data = bytearray()
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise EOFError("the other side closed")
        data += chunk
    return bytes(data)


def link_fields(host: Host, options: SshOptions) -> dict[str, Any]:
    """What the holder needs to open `host` as the command would, as JSON, with the state of
    the ssh config files the connection is resolved from."""
    fields = {k: getattr(host, k) for k in _LINK_FIELDS}
    return {"host": fields, "options": asdict(options), "config": _config_stamp()}


def link_key(fields: dict[str, Any]) -> str:
    """The key a connection is kept under (`link_fields`, persist time left out): another
    address, user, port, key, known-hosts file, jump host, key policy or an edited ssh config
    is another connection."""
    options = {k: v for k, v in fields["options"].items() if k != "persist_s"}
    return json.dumps([fields["host"], options, fields.get("config")], sort_keys=True)


@functools.cache
def _config_stamp() -> str:
    from tfctl.remote.connect.openssh import config_stamp

    return config_stamp()


def host_from(fields: dict[str, Any]) -> tuple[Host, SshOptions]:
    """The `Host` (its SSH settings only) and options `link_fields` described."""
    h = fields["host"]
    host = Host(h["name"], h["address"], h["user"], h["port"], h["identity_file"],
                h["known_hosts"], h["jump"], workdir="~", python="python3", env={}, gpus=(),
                ps=0)
    return host, SshOptions(**fields["options"])


_KINDS: dict[str, type[RemoteError]] = {
    "unreachable": HostUnreachable, "host_key": HostKeyRefused, "auth": AuthRefused}


def error_fields(exc: RemoteError) -> dict[str, Any]:
    return {"host": exc.host, "what": exc.what, "detail": exc.detail, "kind": exc.kind}


def error_from(fields: dict[str, Any]) -> RemoteError:
    """The command-side twin of an error the holder met (the same class where it matters: the
    CLI's messages and exit codes read the kind)."""
    cls = _KINDS.get(fields["kind"])
    if cls is not None:
        return cls(fields["host"], fields["what"], fields["detail"])
    return RemoteError(fields["host"], fields["what"], fields["detail"], kind=fields["kind"])
