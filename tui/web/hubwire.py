"""What the dashboard's hub (hub.py, in the `ui --web` server) and a tab's viewer (hubsources.py)
say to each other over the hub's Unix socket, and where that socket is.

One call per connection: the viewer sends `CALL` (the method's name and arguments), the hub
answers with any number of `EVENT`s (the lines `up` tells as it goes) and then one `RESULT` or
one `RAISED`. Frames are the connection holder's (remote/connect/hold/protocol.py: a kind byte,
a length, the payload).

Payloads are pickles: the answers are the records the dashboard already reads (a run's
`RunStatus`, every host's `HostTelemetry`, the lab's rows, `GpusBusy`...), several of them
nested, with exception classes as values, and kept in step by other modules as they grow;
both ends are the same tfctl (the server starts its viewers with its own interpreter). Who may
send one is checked before it is read: the socket is the user's (mode 0600, in the 0700 folder
the holder's socket is in) and each side checks the other's uid (SO_PEERCRED). What is read is
narrowed anyway (`loads`): tfctl's own classes, a few plain types of the standard library, and
exception classes; nothing else is looked up, no function called but the one that rebuilds an
exception.
"""

from __future__ import annotations

import io
import os
import pickle
import socket
import struct
from pathlib import Path
from typing import Any

from tfctl.remote.connect.hold.protocol import recv_frame, runtime_dir, send_frame

CALL, EVENT, RESULT, RAISED = b"c", b"e", b"v", b"!"

_PLAIN = {
    ("builtins", name) for name in (
        "set", "frozenset", "dict", "list", "tuple", "bytes", "bytearray", "str", "int",
        "float", "complex", "bool", "range", "slice", "object", "type")
} | {("collections", "deque"), ("collections", "OrderedDict"), ("datetime", "datetime"),
     ("datetime", "date"), ("datetime", "timedelta"), ("datetime", "timezone"),
     ("pathlib", "PosixPath"), ("pathlib", "PurePosixPath")}
"""The standard library's types an answer may hold besides tfctl's own records."""


class HubGone(RuntimeError):
    """The hub does not answer: the server has ended (its viewers end with it)."""


class HubFailed(RuntimeError):
    """What the hub met could not be sent as it was: its type and words."""


def socket_path() -> Path:
    """This server's socket: the user's runtime folder (0700), named by the server's pid."""
    return runtime_dir() / f"web-{os.getpid()}.sock"


def listen(path: Path) -> socket.socket:
    """The hub's socket bound at `path` (mode 0600) and listening."""
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    path.unlink(missing_ok=True)
    old = os.umask(0o177)
    try:
        server.bind(str(path))
    except OSError:
        server.close()
        raise
    finally:
        os.umask(old)
    server.listen(64)
    return server


def dial(path: str | Path) -> socket.socket:
    """A connection to the hub at `path`, once it is known to be this user's; `HubGone` when
    nothing answers there."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(str(path))
    except OSError as exc:
        sock.close()
        raise HubGone(f"the dashboard's server does not answer ({exc.strerror or exc})") \
            from None
    if not peer_is_us(sock):
        sock.close()
        raise HubGone(f"{path} is another user's socket")
    return sock


def peer_is_us(sock: socket.socket) -> bool:
    """The process at the other end of `sock` runs as this user."""
    creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    _pid, uid, _gid = struct.unpack("3i", creds)
    return bool(uid == os.getuid())


def peer_pid(sock: socket.socket) -> int:
    creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    pid: int = struct.unpack("3i", creds)[0]
    return pid


def send(sock: socket.socket, kind: bytes, value: object) -> None:
    send_frame(sock, kind, dumps(value))


def receive(sock: socket.socket) -> tuple[bytes, Any]:
    """The next frame and its value; EOFError when the other side has closed."""
    kind, data = recv_frame(sock)
    return kind, loads(data)


# ---------------------------------------------------------------- the payloads

def dumps(value: object) -> bytes:
    buffer = io.BytesIO()
    _Pickler(buffer, protocol=pickle.HIGHEST_PROTOCOL).dump(value)
    return buffer.getvalue()


def loads(data: bytes) -> Any:
    return _Unpickler(io.BytesIO(data)).load()


def _known_ancestor(cls: type[BaseException]) -> type[BaseException]:
    """`cls`, or its nearest ancestor that tfctl or Python itself defines: the class of an
    error paramiko or a socket raised travels as what the other side surely has."""
    for base in cls.__mro__:
        if base.__module__ == "builtins" or base.__module__.startswith("tfctl."):
            return base
    return Exception


def rebuilt(cls: type[BaseException], args: tuple[Any, ...], state: dict[str, Any]
            ) -> BaseException:
    """An exception as it was sent (its class, `args` and attributes), without calling its
    `__init__`: tfctl's errors are dataclasses whose `args` are not their fields."""
    exc = cls.__new__(cls)
    exc.args = args
    exc.__dict__.update(state)
    return exc


def same_class(cls: type) -> type:
    """`cls`: how a class that stands for another is sent (`_Pickler`)."""
    return cls


class _Pickler(pickle.Pickler):
    """Exceptions sent as `rebuilt` rebuilds them, and classes of exceptions the other side
    may not have imported as their nearest known ancestor (`_known_ancestor`)."""

    def reducer_override(self, obj: Any) -> Any:
        if isinstance(obj, type):
            if issubclass(obj, BaseException) and (known := _known_ancestor(obj)) is not obj:
                return same_class, (known,)
            return NotImplemented
        if isinstance(obj, BaseException):
            cls = _known_ancestor(type(obj))
            if cls is not type(obj):
                return rebuilt, (cls, (f"{type(obj).__name__}: {obj}",), {})
            args = tuple(a if isinstance(a, (str, int, float, bool, type(None))) else str(a)
                         for a in obj.args)
            return rebuilt, (cls, args, dict(getattr(obj, "__dict__", {})))
        return NotImplemented


class _Unpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        if module == __name__ and name in ("rebuilt", "same_class"):
            return rebuilt if name == "rebuilt" else same_class
        if (module, name) in _PLAIN:
            return super().find_class(module, name)
        found = None
        if module.startswith("tfctl.") or module == "builtins":
            found = super().find_class(module, name)
        if isinstance(found, type) and (module != "builtins"
                                        or issubclass(found, BaseException)):
            return found
        raise pickle.UnpicklingError(f"the dashboard's hub sent {module}.{name}, which a "
                                     "viewer does not read")

