"""Free ports for a run's tasks on this host, so that two runs share it without `ports:`.

Part of the agent program (`__init__.py`): stdlib only, Python >= 3.8, Linux, no tfctl imports.

A task whose port the inventory does not write keeps its usual port (the plan's) where that is
free here, else takes the lowest free port of the job's range. Free means three things, each
seen from this host's network namespace, the one the tasks will listen in:

- no socket LISTENs on it (`proc.listening_sockets`, any user's), the port of a fixed task of the
  same run is not it, and no other choice of this answer took it;
- a bind on every address succeeds (`::` dual-stack, else `0.0.0.0`; SO_REUSEADDR, as gRPC
  binds, so a connection in TIME_WAIT does not count): what TensorFlow's server will do;
- no other `up` leased it in the last LEASE_S seconds. A run's tasks listen only once
  TensorFlow is imported, seconds after `up` chose their ports; two users typing `up` in those
  seconds would otherwise take the same ports. A lease is a small file, `<ns>-<port>` in the
  sticky folder LEASE_DIR (`/tmp`'s rule: anyone writes, only the owner replaces), `<ns>` the
  network namespace's inode; the same `up`'s second check (its `token`) keeps its own leases,
  and `up_go` drops them once no task is still starting (each listens, or has ended: a short
  job's), so that a `down` and an `up` right after it find the usual ports again.
  A lease is a hint between well-behaved callers, read with O_NOFOLLOW and never trusted beyond
  skipping a port; an unreadable or foreign folder costs only the hint.

`taken_since` is the last look, in `up_go`, just before the tasks start: a port taken since the
check refuses the start (the client rolls the run back) rather than letting a task die on it.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from tfctl.remote.agent.proc import listening_sockets
from tfctl.remote.agent.wire import json_dumps, json_loads

LEASE_DIR = "/tmp/tfctl-port-leases"
LEASE_S = 120.0


def choose_ports(wanted: Sequence[Mapping[str, Any]], low: int, high: int,
                 fixed: Iterable[int] = (), token: str | None = None) -> dict[str, Any]:
    """`wanted`: [{"task", "preferred"}] in plan order → {"chosen": {task: port}, "short":
    [tasks no free port was left for]}; leases what it chose when given a `token`."""
    taken = {port for port, _uid in listening_sockets().values()} | {int(p) for p in fixed}
    chosen: dict[str, int] = {}
    short: list[str] = []
    for want in wanted:
        task, preferred = str(want["task"]), int(want["preferred"])
        found = None
        for port in [preferred, *range(low, high + 1)]:
            if port in taken or _leased_by_another(port, token) or not bindable(port):
                taken.add(port)
                continue
            found = port
            break
        if found is None:
            short.append(task)
            continue
        taken.add(found)
        chosen[task] = found
    if token:
        for port in chosen.values():
            _lease(port, token)
    return {"chosen": chosen, "short": short}


def taken_since(ports: Iterable[int]) -> list[int]:
    """Of `ports`, those something took since they were chosen (listening, or not bindable)."""
    ports = [int(p) for p in ports]
    listening = {port for port, _uid in listening_sockets(ports).values()}
    return [p for p in ports if p in listening or not bindable(p)]


def bindable(port: int) -> bool:
    """Whether a listener could bind `port` on every address now (the bind is undone at once)."""
    import socket  # here: every agent start would pay for it (~3 ms), few operations bind

    for family, address in ((socket.AF_INET6, "::"), (socket.AF_INET, "0.0.0.0")):
        try:
            sock = socket.socket(family, socket.SOCK_STREAM)
        except OSError:  # no IPv6 on this host: the IPv4 bind decides
            continue
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
            sock.bind((address, port))
        except OSError as exc:
            if family == socket.AF_INET6 and exc.errno == 99:  # EADDRNOTAVAIL: no ::, try v4
                continue
            return False
        finally:
            sock.close()
        return True
    return False


def release(token: str) -> None:
    """Drop this user's leases of `token` in this network namespace: their tasks listen."""
    prefix = _namespace() + "-"
    try:
        names = [n for n in os.listdir(LEASE_DIR) if n.startswith(prefix)]
    except OSError:
        return
    for name in names:
        path = os.path.join(LEASE_DIR, name)
        with contextlib.suppress(OSError, ValueError, AttributeError):
            if os.lstat(path).st_uid == os.getuid() and _read_lease(path).get("token") == token:
                os.unlink(path)


def _namespace() -> str:
    try:
        return str(os.stat("/proc/self/ns/net").st_ino)
    except OSError:
        return "0"


def _lease_path(port: int) -> str:
    return os.path.join(LEASE_DIR, f"{_namespace()}-{port}")


def _read_lease(path: str) -> dict[str, Any]:
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    with os.fdopen(fd, "rb") as f:
        lease = json_loads(f.read(4096).decode())
    return lease if isinstance(lease, dict) else {}


def _leased_by_another(port: int, token: str | None) -> bool:
    try:
        lease = _read_lease(_lease_path(port))
        return float(lease["until"]) > time.time() and lease.get("token") != token
    except (OSError, ValueError, KeyError, TypeError):
        return False


def _lease(port: int, token: str) -> None:
    """Best effort: a folder another user made unwritable, or a lease of theirs, is left be."""
    with contextlib.suppress(OSError):  # made by whoever comes first, for everyone
        os.mkdir(LEASE_DIR, 0o777)
        os.chmod(LEASE_DIR, 0o1777)
    target = _lease_path(port)
    temp = f"{target}.{os.getpid()}.tmp"
    try:
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
        with os.fdopen(fd, "w") as f:
            f.write(json_dumps({"token": token, "until": time.time() + LEASE_S}))
        os.replace(temp, target)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(temp)
