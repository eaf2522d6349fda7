"""The agent's view of listening TCP sockets (remote/agent/proc.py `listening_sockets`): what the
kernel's socket diagnostics (netlink sock_diag) answer is what /proc/net/tcp{,6} list, IPv4 and
IPv6, one port or all; and where netlink is refused, the tables answer the same."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

from tfctl.remote.agent import proc


def _tables() -> dict[int, tuple[int, int]]:
    """Socket inode → (port, uid) of the LISTEN rows of /proc/net/tcp and tcp6, read here."""
    found = {}
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            for row in f.read().splitlines()[1:]:
                cols = row.split()
                if cols[3] == "0A":
                    found[int(cols[9])] = (int(cols[1].rsplit(":", 1)[1], 16), int(cols[7]))
    return found


@pytest.fixture
def listeners() -> Iterator[tuple[int, int]]:
    """An IPv4 and an IPv6 listener on ports the kernel chose, and a connection to the first
    (an established socket, never listed)."""
    v4 = socket.socket()
    v4.bind(("127.0.0.1", 0))
    v4.listen()
    v6 = socket.socket(socket.AF_INET6)
    v6.bind(("::1", 0))
    v6.listen()
    client = socket.create_connection(v4.getsockname())
    try:
        yield v4.getsockname()[1], v6.getsockname()[1]
    finally:
        for s in (client, v4, v6):
            s.close()


def _ours(found: dict[int, tuple[int, int]], ports: tuple[int, int]) -> dict[int, tuple[int, int]]:
    """Of `found`, this test's listeners (other processes of the machine come and go)."""
    return {inode: entry for inode, entry in found.items() if entry[0] in ports}


def test_the_kernel_answers_what_the_tables_list(listeners: tuple[int, int]) -> None:
    port4, port6 = listeners
    answered = _ours(proc.listening_sockets(), listeners)
    assert answered == _ours(_tables(), listeners) == proc.listening_sockets(listeners)
    assert sorted(port for port, _uid in answered.values()) == sorted(listeners)
    assert [p for p, _ in proc.listening_sockets([port4]).values()] == [port4]
    assert [p for p, _ in proc.listening_sockets([port6]).values()] == [port6]
    assert proc.listening_sockets([1]) == {}


def test_without_netlink_the_tables_answer(listeners: tuple[int, int],
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    def refused() -> dict[int, tuple[int, int]]:
        raise PermissionError(1, "netlink refused")

    monkeypatch.setattr(proc, "_diag_listening", refused)
    assert _ours(proc.listening_sockets(), listeners) == _ours(_tables(), listeners)
    assert [p for p, _ in proc.listening_sockets([listeners[1]]).values()] == [listeners[1]]
