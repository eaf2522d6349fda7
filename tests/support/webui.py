"""`tfctl ui --web` as the web tests drive it: the server as a real process (`WebServer`), a
headless Chromium (`chromium`, the system's, through Playwright), a TCP forwarder standing for
`ssh -L` with another local port (`Forwarder`), a raw websocket handshake (`handshake`), and what
a screenshot shows (`orange_pixels`: the help screen's border).
"""

from __future__ import annotations

import base64
import contextlib
import http.client
import io
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tests.support.procs import alive, children

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Page, Playwright

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--headless", "--disable-gpu", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update",
                 "--disable-sync"]
"""As root Chromium needs --no-sandbox; the rest keeps it off the (closed) network. Playwright
gives each launch a fresh --user-data-dir of its own (it refuses one in `args`)."""
VIEWPORT = {"width": 1280, "height": 800}
DRAW_S = 30.0
"""How long a tab may take to show its first output: a viewer is a fresh Python process that
imports Textual and tfctl (2-4 s on a loaded 2-core machine)."""


def chromium(playwright: Playwright) -> Browser:
    if not os.path.exists(CHROMIUM):
        raise AssertionError("chromium is not installed: scripts/test installs it "
                             "(scripts/system-packages.txt)")
    return playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)


class WebServer:
    """`tfctl -i INV ui --web --port 0 ...`, started; `url` is the address it printed."""

    def __init__(self, inventory: Path, *extra: str, env: Mapping[str, str] | None = None
                 ) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tfctl.tui", "-i", str(inventory), "ui", "--web",
             "--port", "0", *extra],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=inventory.parent,
            env={**os.environ, **(env or {})})
        assert self.proc.stdout is not None
        self.url = self.proc.stdout.readline().strip()
        if not self.url.startswith("http://"):
            self.proc.kill()
            raise AssertionError(f"no address printed: {self.url!r} {self.proc.stderr.read()}")
        host_port, _, query = self.url[len("http://"):].partition("/?token=")
        self.host, _, port = host_port.rpartition(":")
        self.port = int(port)
        self.token = query
        self.base = f"http://{host_port}"

    @property
    def pid(self) -> int:
        return self.proc.pid

    def viewers(self) -> set[int]:
        """The live dashboard processes the server started (one per open tab; not the
        connection holder, also its child)."""
        return {p for p in children(self.pid)
                if alive(p) and b"--web-viewer" in read_proc(p, "cmdline")}

    def interrupt(self, timeout_s: float = 20.0) -> int:
        """Ctrl-C (SIGINT) to the server; its exit status once it has ended."""
        self.proc.send_signal(signal.SIGINT)
        return self.proc.wait(timeout_s)

    def close(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.interrupt()
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def open_dashboard(page: Page, url: str) -> None:
    """Open `url` and wait until its terminal has drawn (`body.-first-byte`)."""
    page.goto(url)
    page.wait_for_selector("body.-first-byte", state="attached", timeout=DRAW_S * 1000)


def orange_pixels(page: Page) -> int:
    """Pixels of the help screen's orange border (#ffa62b) in a screenshot: a few hundred
    (the footer's key letters) without the help, tens of thousands with it."""
    import numpy as np
    from PIL import Image

    image = np.asarray(Image.open(io.BytesIO(page.screenshot())).convert("RGB")).astype(int)
    r, g, b = image[..., 0], image[..., 1], image[..., 2]
    return int(((r > 220) & (g > 130) & (g < 200) & (b < 100)).sum())


def colours(page: Page) -> int:
    """How many colours a screenshot has (a blank page has one or two)."""
    from PIL import Image

    image = Image.open(io.BytesIO(page.screenshot())).convert("RGB")
    return len(image.getcolors(maxcolors=1 << 20) or [])


def wait_for(what: str, check: object, timeout_s: float, every_s: float = 0.2) -> object:
    """`check()`'s first truthy answer, asked every `every_s`; AssertionError after
    `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while True:
        found = check()  # type: ignore[operator]
        if found or time.monotonic() >= deadline:
            if not found:
                raise AssertionError(f"no {what} within {timeout_s:g} s")
            return found
        time.sleep(every_s)


# ---------------------------------------------------------------- HTTP and websockets by hand

def get(port: int, path: str, cookie: str | None = None) -> http.client.HTTPResponse:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    connection.request("GET", path, headers={"Cookie": cookie} if cookie else {})
    answer = connection.getresponse()
    answer.read()
    connection.close()
    return answer


def cookie_for(server: WebServer) -> str:
    """The `name=value` cookie the token buys."""
    answer = get(server.port, f"/?token={server.token}")
    assert answer.status == 200, answer.status
    return answer.headers["Set-Cookie"].split(";")[0]


def handshake(port: int, origin: str | None, cookie: str | None,
              host: str | None = None) -> int:
    """The status of a websocket handshake on `/ws` (101: accepted), the socket closed
    right after."""
    host = host or f"127.0.0.1:{port}"
    lines = ["GET /ws?width=80&height=24 HTTP/1.1", f"Host: {host}", "Upgrade: websocket",
             "Connection: Upgrade", "Sec-WebSocket-Version: 13",
             "Sec-WebSocket-Key: " + base64.b64encode(os.urandom(16)).decode()]
    if origin is not None:
        lines.append(f"Origin: {origin}")
    if cookie is not None:
        lines.append(f"Cookie: {cookie}")
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
        status = sock.recv(4096).split(b"\r\n", 1)[0]
    return int(status.split()[1])


class Forwarder:
    """A local port relaying every connection to `target_port`, as `ssh -L` does: the browser
    sees another port number than the server listens on."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            server = socket.create_connection(("127.0.0.1", self.target_port))
            for a, b in ((client, server), (server, client)):
                threading.Thread(target=_pump, args=(a, b), daemon=True).start()

    def close(self) -> None:
        self.listener.close()


def _pump(source: socket.socket, sink: socket.socket) -> None:
    with contextlib.suppress(OSError):
        while data := source.recv(65536):
            sink.sendall(data)
    with contextlib.suppress(OSError):
        sink.shutdown(socket.SHUT_WR)


# ---------------------------------------------------------------- processes and sockets

def listening(pid: int) -> list[str]:
    """The addresses `pid` listens on (TCP, IPv4 and IPv6), as `ip:port`."""
    inodes = set()
    for fd in os.scandir(f"/proc/{pid}/fd"):
        with contextlib.suppress(OSError):
            target = os.readlink(fd.path)
            if target.startswith("socket:["):
                inodes.add(target[len("socket:["):-1])
    found = []
    for table, width in (("/proc/net/tcp", 8), ("/proc/net/tcp6", 32)):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A" and fields[9] in inodes:  # 0A: LISTEN
                address, port = fields[1].split(":")
                found.append(f"{_address(address, width)}:{int(port, 16)}")
    return found


def _address(hex_address: str, width: int) -> str:
    raw = bytes.fromhex(hex_address)
    if width == 8:
        return socket.inet_ntop(socket.AF_INET, raw[::-1])
    words = b"".join(raw[i:i + 4][::-1] for i in range(0, 16, 4))
    return socket.inet_ntop(socket.AF_INET6, words)


def read_proc(pid: int, what: str) -> bytes:
    """/proc/<pid>/<what> (cmdline, environ), or b"" for a process gone."""
    try:
        return Path(f"/proc/{pid}/{what}").read_bytes()
    except OSError:
        return b""


def new_page(browser: Browser) -> Page:
    """A page in a browser context of its own (its own cookies); close its `context`."""
    return browser.new_context(viewport=VIEWPORT).new_page()  # type: ignore[arg-type]


def unix_clients(path: str) -> set[int]:
    """The processes connected to the Unix socket a server listens on at `path` (`ss -xp`)."""
    rows = [line.split() for line in subprocess.run(
        ["ss", "-xpn"], capture_output=True, text=True, check=True).stdout.splitlines()[1:]]
    accepted = {row[7] for row in rows if len(row) >= 8 and row[4] == path}
    pids: set[int] = set()
    for row in rows:
        if len(row) >= 9 and row[5] in accepted:
            pids.update(int(part.split("=")[1].split(",")[0].rstrip(")"))
                        for part in row[8].split(",") if part.startswith("pid="))
    return pids


# ---------------------------------------------------------------- what the dashboard costs a host

def host_costs(testbed: Any) -> dict[str, dict[str, int]]:
    """host → how many SSH connections (sshd processes serving one: every sshd of the host but
    the listener), agent sessions and nvidia-smi streams (`-lms`: the GPU telemetry) run there,
    counting only what runs in two looks a second apart: an exec that comes and goes (the
    compute-apps query, a user lookup) is not what a viewer keeps. The lab's idle sampler,
    which outlives the request that started it by design (remote/agent/lab.py), is none of
    these."""
    from tests.support.holders import agents, cmdline
    from tests.support.testbedtools import ssh_sessions

    def look() -> dict[str, dict[str, set[int]]]:
        sessions = agents(testbed)
        return {h: {"ssh": set(ssh_sessions(testbed, h)), "agents": sessions[h],
                    "nvidia-smi streams": {p for p in testbed.pids_in(h)
                                           if _streams_nvidia_smi(cmdline(p))}}
                for h in testbed.names}

    first = look()
    time.sleep(1.0)
    second = look()
    return {h: {what: len(first[h][what] & second[h][what]) for what in first[h]}
            for h in testbed.names}


def _streams_nvidia_smi(command_line: str) -> bool:
    """nvidia-smi in loop mode (or the testbed's stand-in, a script run by python, so), not a
    shell that names it."""
    words = command_line.split()
    return "-lms" in words and any(
        os.path.basename(w) in ("nvidia-smi", "nvidia_smi_standin.py") for w in words[:2])
