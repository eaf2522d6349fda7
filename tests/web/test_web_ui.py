"""`tfctl ui --web` in a real headless Chromium: the dashboard of a `transport: local` inventory
(no testbed), served by the real command, reached at the address it printed, directly and
through a forwarded port of another number; refused without the token and from another Origin;
one dashboard process per tab; nothing left after Ctrl-C.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.support.localcluster import local_cluster
from tests.support.procs import alive, descendants
from tests.support.webui import (
    DRAW_S,
    Forwarder,
    WebServer,
    chromium,
    colours,
    cookie_for,
    get,
    handshake,
    listening,
    new_page,
    open_dashboard,
    orange_pixels,
    read_proc,
    wait_for,
)

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Page

HELP_SHOWN = 10_000
"""Orange pixels above this: the help screen's border is drawn (a few hundred without it)."""


@pytest.fixture(scope="module")
def inventory(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return local_cluster(tmp_path_factory.mktemp("web"), {"a": {"gpus": 0}})


@pytest.fixture(scope="module")
def server(inventory: Path) -> Iterator[WebServer]:
    served = WebServer(inventory)
    yield served
    served.close()


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        launched = chromium(playwright)
        yield launched
        launched.close()


def press_for_help(page: Page) -> None:
    """`?` in the terminal; the help screen is drawn (its orange border in a screenshot)."""
    page.click("#terminal")
    page.keyboard.press("?")
    wait_for("help screen", lambda: orange_pixels(page) > HELP_SHOWN, DRAW_S)


def test_the_address_draws_the_dashboard_and_a_key_works(server: WebServer,
                                                        browser: Browser) -> None:
    page = new_page(browser)
    asked: list[str] = []
    page.on("request", lambda request: asked.append(request.url))
    try:
        open_dashboard(page, server.url)
        assert page.url == server.base + "/"  # the token left the address bar
        cookie, = page.context.cookies()
        assert cookie["httpOnly"] and cookie["sameSite"] == "Strict"
        assert cookie["value"] != server.token
        wait_for("the dashboard drawn", lambda: colours(page) > 50, DRAW_S)  # not blank
        assert orange_pixels(page) < HELP_SHOWN
        press_for_help(page)
        page.keyboard.press("Escape")
        wait_for("help closed", lambda: orange_pixels(page) < HELP_SHOWN, DRAW_S)
        # Nothing from the internet: every request went to the server itself.
        assert asked and all(url.startswith(server.base + "/") for url in asked), asked
        assert "googleapis" not in page.content()
    finally:
        page.context.close()


def test_without_the_token_every_request_is_refused(server: WebServer,
                                                    browser: Browser) -> None:
    for path in ("/", "/static/js/textual.js", "/static/fonts/", "/download/x",
                 "/?token=wrong", f"/?token={server.token[:-1]}"):
        assert get(server.port, path).status == 403, path
    assert handshake(server.port, origin=server.base, cookie=None) == 403
    assert handshake(server.port, origin=server.base, cookie="tfctl-ui-0=forged") == 403
    page = new_page(browser)
    try:
        answer = page.goto(server.base + "/")
        assert answer is not None and answer.status == 403
    finally:
        page.context.close()


def test_a_websocket_from_another_origin_is_refused(server: WebServer,
                                                    browser: Browser) -> None:
    cookie = cookie_for(server)
    assert handshake(server.port, origin="http://evil.example", cookie=cookie) == 403
    assert handshake(server.port, origin=f"http://localhost:{server.port}", cookie=cookie) == 403
    assert handshake(server.port, origin=None, cookie=cookie) == 403
    # The same cookie with the page's own Origin is let in (so the refusals above are the
    # Origin's); the dashboard it starts ends with the socket.
    assert handshake(server.port, origin=server.base, cookie=cookie) == 101
    # In the browser: a page of another site (localhost is not 127.0.0.1) opening the
    # dashboard's websocket, in a browser that holds the cookie.
    page = new_page(browser)
    try:
        open_dashboard(page, server.url)
        page.goto(f"http://localhost:{server.port}/")  # 403, but a page of that origin
        opened = page.evaluate("""url => new Promise(done => {
            const ws = new WebSocket(url);
            ws.onopen = () => done("open");
            ws.onerror = () => done("refused");
        })""", f"ws://127.0.0.1:{server.port}/ws")
        assert opened == "refused"
    finally:
        page.context.close()


def test_the_page_works_through_a_forwarded_port_of_another_number(server: WebServer,
                                                                  browser: Browser) -> None:
    tunnel = Forwarder(server.port)
    page = new_page(browser)
    asked: list[str] = []
    page.on("request", lambda request: asked.append(request.url))
    local = f"http://127.0.0.1:{tunnel.port}"
    try:
        assert tunnel.port != server.port
        open_dashboard(page, f"{local}/?token={server.token}")
        assert page.get_attribute("#terminal", "data-session-websocket-url") == (
            f"ws://127.0.0.1:{tunnel.port}/ws")
        press_for_help(page)
        assert all(url.startswith(local + "/") for url in asked), asked
    finally:
        page.context.close()
        tunnel.close()


def test_two_viewers_at_once_and_q_ends_only_its_own(server: WebServer,
                                                     browser: Browser) -> None:
    before = server.viewers()
    first, second = new_page(browser), new_page(browser)
    try:
        open_dashboard(first, server.url)
        open_dashboard(second, server.url)
        viewers = server.viewers() - before
        assert len(viewers) == 2, viewers
        for pid in viewers | {server.pid}:  # the token is in no process's arguments or env
            assert server.token.encode() not in read_proc(pid, "cmdline")
            assert server.token.encode() not in read_proc(pid, "environ")
        first.click("#terminal")
        first.keyboard.press("q")
        first.wait_for_selector("body.-closed", state="attached", timeout=DRAW_S * 1000)
        wait_for("the first tab's dashboard to end",
                 lambda: len(server.viewers() & viewers) == 1, DRAW_S)
        assert not second.evaluate("document.body.classList.contains('-closed')")
        press_for_help(second)
    finally:
        first.context.close()
        second.context.close()


def test_it_listens_on_127_0_0_1_only(server: WebServer) -> None:
    assert server.host == "127.0.0.1"
    assert listening(server.pid) == [f"127.0.0.1:{server.port}"]


def test_ctrl_c_ends_the_server_and_every_viewer(inventory: Path, browser: Browser) -> None:
    served = WebServer(inventory)
    pages = [new_page(browser), new_page(browser)]
    try:
        for page in pages:
            open_dashboard(page, served.url)
        viewers = served.viewers()
        assert len(viewers) == 2
        everything = {served.pid} | descendants(served.pid)
        started = time.monotonic()
        assert served.interrupt() == 0
        assert time.monotonic() - started < 10
        for page in pages:  # each tab says its dashboard ended
            page.wait_for_selector("body.-closed", state="attached", timeout=DRAW_S * 1000)
        wait_for("every process of the server and its viewers to end",
                 lambda: not any(alive(p) for p in everything), 5.0)
    finally:
        for page in pages:
            page.context.close()
        served.close()


def test_sigterm_ends_it_as_ctrl_c_does(inventory: Path) -> None:
    served = WebServer(inventory)
    try:
        served.proc.send_signal(signal.SIGTERM)
        assert served.proc.wait(20) == 0
    finally:
        served.close()


def test_port_and_host_go_with_web() -> None:
    from click.testing import CliRunner

    from tfctl.tui.cli.main import main

    result = CliRunner().invoke(main, ["ui", "--port", "8123"])
    assert result.exit_code == 2 and "--port and --host go with --web" in result.output


def test_a_taken_port_is_one_sentence(inventory: Path, server: WebServer) -> None:
    import subprocess
    import sys

    taken = subprocess.run([sys.executable, "-m", "tfctl.tui", "-i", str(inventory), "ui",
                            "--web", "--port", str(server.port)], capture_output=True,
                           text=True, timeout=60, env={**os.environ})
    assert taken.returncode == 1
    assert f"cannot listen on 127.0.0.1 port {server.port}" in taken.stderr
    assert "Traceback" not in taken.stderr
