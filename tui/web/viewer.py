"""One viewer of `tfctl ui --web`: the dashboard in a process of its own per browser tab
(`tfctl ui --web-viewer`, the command server.py starts for each websocket), under Textual's web
driver, which textual-serve sets through `TEXTUAL_DRIVER`.

What differs from the dashboard in a terminal:

- its agent sessions are borrowed from the connection holder (remote/connect/hold), as
  consecutive commands borrow them, instead of connections of its own: the server started the
  holder (where the inventory has SSH hosts and --persist is not 0), so a second tab finds the
  hosts' connections open;
- a report page (`h`, Enter) goes to the browser that shows the dashboard (Textual's
  `deliver_binary`, served by textual-serve at /download/KEY), not to a browser on the machine
  the server runs on;
- it ends when the server is gone: the server ends its viewers when it ends, but one killed
  outright cannot, and a viewer runs in a session of its own (server.py), so nothing else would.

`x` (a shell) needs a terminal to hand over: the web driver cannot suspend, and the dashboard
says to run `tfctl ssh` instead.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from textual.app import App

PARENT_CHECK_S = 1.0


class Viewer:
    """Runs the app of one browser tab (`run`); `open_page` is its `opener`."""

    def __init__(self) -> None:
        self.app: App[Any] | None = None

    def open_page(self, page: str) -> object:
        """Send a written page (a report: one self-contained HTML file) to the browser."""
        assert self.app is not None, "open_page before run"
        return self.app.deliver_binary(page, open_method="browser", mime_type="text/html")

    def run(self, app: App[Any]) -> None:
        self.app = app
        threading.Thread(target=_end_with_parent, args=(app, os.getppid()), daemon=True,
                         name="viewer-parent").start()
        app.run()


def _end_with_parent(app: App[Any], parent: int) -> None:
    """Quit the app once the process that started it (the server) is gone."""
    while os.getppid() == parent:
        time.sleep(PARENT_CHECK_S)
    with contextlib.suppress(RuntimeError):  # not running (any more)
        app.call_from_thread(app.exit)
