"""One viewer of `tfctl ui --web`: the dashboard in a process of its own per browser tab
(`tfctl ui --web-viewer --web-hub SOCKET`, the command server.py starts for each websocket),
under Textual's web driver, which textual-serve sets through `TEXTUAL_DRIVER`.

What differs from the dashboard in a terminal:

- its sources are the server's hub's (hub.py, read through hubsources.py), not the hosts': it
  opens no connection and starts nothing on a host, so a second tab costs the hosts nothing
  new; its actions (up, down, sync, restart) run in the hub too, on the hub's connections;
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
        """Run `app` in this tab until it quits or the server is gone."""
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


def run_viewer(hub: str, *, gpu_refresh_s: float, task_refresh_s: float) -> None:
    """The dashboard of one browser tab over the hub at `hub`, until it quits. `HubGone` where
    the server has already ended."""
    from tfctl.tui.app.factory import make_app
    from tfctl.tui.web.hubsources import connect

    sources = connect(hub, gpu_refresh_s)
    viewer = Viewer()
    control = sources.control
    app = make_app(control, sources.telemetry, owners=sources.telemetry.owner_of,
                   findings=control.findings, tunnel=sources.tunnel,
                   reporter=control.report if sources.reports else None,
                   opener=viewer.open_page, shell=_no_terminal, gpu_refresh_s=gpu_refresh_s,
                   task_refresh_s=task_refresh_s)
    viewer.run(app)


def _no_terminal(target: str) -> int:
    """`x` in a browser: never called (the web driver cannot suspend, and the app says to run
    `tfctl ssh` instead), but offered, so that `x` says so."""
    raise RuntimeError(f"a browser tab has no terminal to hand over: run `tfctl ssh {target}`")
