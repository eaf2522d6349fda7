"""The TensorBoard tunnel, for real: local HTTP/TCP servers, and SSH to the lab's sshd hosts.

Without the lab the tunnel runs against a `transport: local` host (direct connect); with it,
over real SSH: plain forwarding, a jump host, the SSH session killed on the host, the host cut
off and healed — each time the same tunnel object must answer again without being reopened.
"""

from __future__ import annotations

import contextlib
import functools
import http.server
import os
import socket
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.httpget import get, get_eventually
from tests.support.testbed.layout import free_port
from tests.support.testbed.testbed import Testbed
from tests.support.testbedtools import kill_ssh_sessions, ssh_sessions, wait_until
from tfctl.inventory.load import load_inventory
from tfctl.inventory.model import Host
from tfctl.remote.connect.fleet import Fleet
from tfctl.remote.connect.local import LocalTransport
from tfctl.remote.connect.transport import Transport
from tfctl.remote.connect.tunnel import Tunnel, bind_loopback

pytestmark = pytest.mark.timeout(120)


# ---------------------------------------------------------------- helpers

def local_host() -> Host:
    return Host(name="here", address="127.0.0.1", user=None, port=None, identity_file=None,
                known_hosts="/dev/null", jump=None, workdir="/tmp", python=sys.executable,
                env={}, gpus=(), ps=0, transport="local")


def local_factory(_host: str) -> Transport:
    return LocalTransport(local_host())


@contextlib.contextmanager
def http_server(directory: Path) -> Iterator[int]:
    """A real HTTP server on this machine's 127.0.0.1, serving `directory`."""
    handler = functools.partial(_QuietHandler, directory=str(directory))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        return


@contextlib.contextmanager
def echo_server() -> Iterator[int]:
    """A TCP server that echoes everything and closes once the client has half-closed."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)

    def serve(conn: socket.socket) -> None:
        with conn:
            while data := conn.recv(65536):
                conn.sendall(data)

    def accept() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            threading.Thread(target=serve, args=(conn,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    try:
        yield listener.getsockname()[1]
    finally:
        listener.close()


def listening_addresses(port: int) -> list[str]:
    """Local addresses of this namespace's LISTEN sockets on `port` (from `ss`)."""
    out = subprocess.run(["ss", "-Hltn", f"sport = :{port}"], capture_output=True, text=True,
                         check=True).stdout
    return [line.split()[3] for line in out.splitlines() if line.strip()]


# ---------------------------------------------------------------- local transport

def test_forwards_http_on_loopback_only(tmp_path: Path) -> None:
    (tmp_path / "hello.txt").write_text("hello through the tunnel\n")
    with http_server(tmp_path) as port:
        tunnel = Tunnel(local_factory, "here", port, free_port())
        url = tunnel.open()
        try:
            assert tunnel.state == "up" and tunnel.port_note is None
            assert url == f"http://127.0.0.1:{tunnel.local_port}/"
            assert get(url + "hello.txt") == (200, b"hello through the tunnel\n")
            assert listening_addresses(tunnel.local_port or 0) == [f"127.0.0.1:{tunnel.local_port}"]
        finally:
            tunnel.close()
        assert tunnel.state == "closed"
        with pytest.raises(OSError):
            get(url + "hello.txt", timeout=2)


def test_taken_port_moves_to_the_next_free_one_and_says_so(tmp_path: Path) -> None:
    (tmp_path / "x").write_text("x")
    holder = socket.socket()
    holder.bind(("0.0.0.0", 0))  # taken on every address, as another TensorBoard would
    holder.listen(1)
    taken = holder.getsockname()[1]
    try:
        with http_server(tmp_path) as port, Tunnel(local_factory, "here", port, taken) as tunnel:
            assert tunnel.local_port is not None and tunnel.local_port != taken
            assert tunnel.local_port > taken
            assert tunnel.port_note == (f"local port {taken} is taken, so the tunnel listens "
                                        f"on {tunnel.local_port}")
            assert get(f"{tunnel.url}x") == (200, b"x")
    finally:
        holder.close()


def test_default_local_port_is_6006_or_the_next_free() -> None:
    tunnel = Tunnel(local_factory, "here", 1)
    assert tunnel.requested_port == 6006
    sock = bind_loopback(6006)
    try:
        assert sock.getsockname()[0] == "127.0.0.1" and sock.getsockname()[1] >= 6006
    finally:
        sock.close()


def test_large_transfer_both_ways_with_half_close() -> None:
    payload = os.urandom(3 * 1024 * 1024)
    with echo_server() as port, Tunnel(local_factory, "here", port, free_port()) as tunnel:
        with socket.create_connection(("127.0.0.1", tunnel.local_port or 0), timeout=10) as s:
            def send() -> None:
                s.sendall(payload)
                s.shutdown(socket.SHUT_WR)  # the half-close must reach the server

            sender = threading.Thread(target=send)
            sender.start()
            received = bytearray()
            while chunk := s.recv(65536):
                received += chunk
            sender.join()
        assert bytes(received) == payload


def test_many_parallel_requests(tmp_path: Path) -> None:
    for i in range(20):
        (tmp_path / f"f{i}").write_text(str(i) * 1000)
    with http_server(tmp_path) as port, Tunnel(local_factory, "here", port, free_port()) as t:
        results: dict[int, tuple[int, bytes]] = {}
        threads = [threading.Thread(target=lambda i=i: results.__setitem__(
            i, get(f"{t.url}f{i}"))) for i in range(20)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        assert results == {i: (200, str(i).encode() * 1000) for i in range(20)}


def test_nothing_listening_is_said_and_the_tunnel_stays_up(tmp_path: Path) -> None:
    said: list[str] = []
    dead_port = free_port()
    (tmp_path / "ok").write_text("ok")
    with Tunnel(local_factory, "here", dead_port, free_port(), say=said.append) as tunnel:
        assert tunnel.probe() is not None and "does not answer" in (tunnel.probe() or "")
        with pytest.raises((OSError, urllib.error.URLError)):
            get(f"{tunnel.url}ok", timeout=5)
        wait_until("a message said",
                   lambda: any("does not answer" in s for s in said), 5, every_s=0.2)
        # TensorBoard starts later on that port: the same tunnel now answers.
        server = http.server.ThreadingHTTPServer(
            ("127.0.0.1", dead_port), functools.partial(_QuietHandler, directory=str(tmp_path)))
        threading.Thread(target=server.serve_forever, daemon=True).start()
        try:
            assert tunnel.probe() is None
            assert get(f"{tunnel.url}ok") == (200, b"ok")
        finally:
            server.shutdown()
            server.server_close()


def test_reopen_after_close(tmp_path: Path) -> None:
    (tmp_path / "a").write_text("a")
    with http_server(tmp_path) as port:
        tunnel = Tunnel(local_factory, "here", port, free_port())
        for _ in range(2):
            url = tunnel.open()
            assert get(url + "a") == (200, b"a")
            tunnel.close()
        assert tunnel.state == "closed"


# ---------------------------------------------------------------- over SSH (the lab)

@pytest.fixture
def web_on_h1(testbed: Testbed, tmp_path: Path) -> Iterator[int]:
    """A web server on lab host h1's own 127.0.0.1 (inside its namespace when isolated)."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "index.html").write_text("<h1>on h1</h1>")
    port = 18000 + os.getpid() % 1000
    argv = [sys.executable, "-m", "http.server", "--bind", "127.0.0.1", "--directory",
            str(site), str(port)]
    namespace = testbed.host("h1").namespace
    if namespace is not None:
        argv = ["ip", "netns", "exec", namespace, *argv]
    server = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_until("the web server on h1 listens",
                   lambda: bool(testbed.run("h1", f"ss -Hltn 'sport = :{port}'").stdout.strip()),
                   10, every_s=0.2)
        yield port
    finally:
        server.kill()
        server.wait()


def lab_fleet(testbed: Testbed, tmp_path: Path, **kw: Any) -> Fleet:
    inv = testbed.write_inventory(tmp_path / "cluster.yaml", {"script": "job.py"}, **kw)
    return Fleet(load_inventory(inv))


def test_ssh_forwarding_reaches_the_hosts_loopback(testbed: Testbed, tmp_path: Path,
                                                  web_on_h1: int) -> None:
    with lab_fleet(testbed, tmp_path) as fleet, Tunnel(fleet, "h1", web_on_h1, free_port()) as t:
        assert get(t.url or "") == (200, b"<h1>on h1</h1>")
        assert listening_addresses(t.local_port or 0) == [f"127.0.0.1:{t.local_port}"]
        if testbed.isolated:  # h1's loopback is not this machine's: only SSH could have reached it
            with pytest.raises(OSError):
                socket.create_connection(("127.0.0.1", web_on_h1), timeout=1).close()


def test_ssh_through_a_jump_host(testbed: Testbed, tmp_path: Path, web_on_h1: int) -> None:
    if not testbed.isolated:
        pytest.skip("needs the network-namespace lab")
    jump = f"{testbed.user}@{testbed.address('h2')}:22"
    fleet = lab_fleet(testbed, tmp_path, host_fields={"h1": {"jump": jump}})
    with fleet, Tunnel(fleet, "h1", web_on_h1, free_port()) as tunnel:
        assert get(tunnel.url or "") == (200, b"<h1>on h1</h1>")
        assert ssh_sessions(testbed, "h2"), "the connection went through h2"


def test_reconnects_after_the_ssh_session_is_killed(testbed: Testbed, tmp_path: Path,
                                                   web_on_h1: int) -> None:
    if not testbed.isolated:
        pytest.skip("needs the network-namespace lab (to find h1's sshd sessions)")
    said: list[str] = []
    with lab_fleet(testbed, tmp_path) as fleet, Tunnel(fleet, "h1", web_on_h1, free_port(),
                                                   say=said.append, keepalive_s=1.0) as tunnel:
        assert get(tunnel.url or "")[0] == 200
        assert kill_ssh_sessions(testbed, "h1")
        wait_until("the tunnel reconnected by itself",
                   lambda: tunnel.reconnects >= 1, 30, every_s=0.2)
        assert get_eventually(tunnel.url or "", 30) == (200, b"<h1>on h1</h1>")
        assert any("lost" in s for s in said) and any("reconnected" in s for s in said)


def test_answers_again_after_the_host_is_cut_and_healed(healed: Testbed, tmp_path: Path,
                                                       web_on_h1: int) -> None:
    testbed = healed
    if not testbed.isolated:
        pytest.skip("needs the network-namespace lab")
    fleet = lab_fleet(testbed, tmp_path)
    with fleet, Tunnel(fleet, "h1", web_on_h1, free_port(), keepalive_s=1.0,
                       dead_after_s=2.0) as tunnel:
        assert get(tunnel.url or "")[0] == 200
        testbed.cut("h1")
        wait_until("the silent link noticed",
                   lambda: tunnel.state == "reconnecting", 20, every_s=0.2)
        testbed.heal("h1")
        assert get_eventually(tunnel.url or "", 40) == (200, b"<h1>on h1</h1>")
        assert tunnel.state == "up" and tunnel.reconnects >= 1
