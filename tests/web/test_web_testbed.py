"""`tfctl ui --web` over the testbed's SSH hosts: two tabs, through a forwarded port, borrow
their agent sessions from the connection holder the server started; after Ctrl-C the server and
its tabs' processes are gone and only the holder stays, for --persist, as after any command."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.holders import wait_holders
from tests.support.procs import alive, descendants, parent_of
from tests.support.testbedtools import FOREVER_FLAGS
from tests.support.webui import (
    DRAW_S,
    Forwarder,
    WebServer,
    chromium,
    colours,
    new_page,
    open_dashboard,
    unix_clients,
    wait_for,
)

pytestmark = pytest.mark.testbed


def test_two_tabs_borrow_from_the_servers_holder(testbed, tmp_path: Path,  # type: ignore[no-untyped-def]
                                                 held: dict[str, str]) -> None:
    from playwright.sync_api import sync_playwright

    inv = testbed.write_inventory(tmp_path / "cluster.yaml", FOREVER_FLAGS)
    runtime = Path(held["XDG_RUNTIME_DIR"])
    served = WebServer(inv, env=held)
    tunnel = Forwarder(served.port)
    with sync_playwright() as playwright:
        browser = chromium(playwright)
        try:
            holder, = wait_holders(runtime)
            assert parent_of(holder) == served.pid  # the server started it
            socket, = (runtime / "tfctl").glob("*.sock")
            pages = [new_page(browser), new_page(browser)]
            for page in pages:
                open_dashboard(page, f"http://127.0.0.1:{tunnel.port}/?token={served.token}")
                wait_for("the dashboard drawn", lambda p=page: colours(p) > 50, DRAW_S)
            viewers = served.viewers()
            assert len(viewers) == 2
            wait_for("both tabs borrowing from the holder",
                     lambda: viewers <= unix_clients(str(socket)), DRAW_S)
            everything = descendants(served.pid) - {holder}
            assert served.interrupt() == 0
            wait_for("the server's and its tabs' processes to end",
                     lambda: not any(alive(p) for p in everything), 10.0)
            assert alive(holder)  # kept for --persist, as after any command
        finally:
            browser.close()
            tunnel.close()
            served.close()
