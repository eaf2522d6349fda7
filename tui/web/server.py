"""textual-serve's `Server`, fitted to `tfctl ui --web` (tui/web/__init__.py).

textual-serve (Textualize/textual-serve 1.1) serves the page, its scripts and fonts, and a
websocket per browser tab that drives one process of the app through Textual's web driver. What
this subclass changes of its behaviour, and why:

- **Access** (`access.guard`, in front of every route): a token per start, a cookie, and the
  websocket's Origin checked. textual-serve has no authentication (textual-serve#41) nor an
  Origin check.
- **URLs from the request**: textual-serve writes `public_url` (its own host and port) into the
  page's websocket and static URLs, so a tunnel with another local port (`ssh -L
  8080:127.0.0.1:8123`) loads the page but never connects (textual-serve#42). `handle_index`
  renders page.html here, with relative static URLs and the websocket's built from the Host
  header the browser sent.
- **Nothing from the internet**: textual-serve's page loads its font from fonts.googleapis.com;
  page.html loads the same Roboto Mono from textual-serve's own static files, and its
  Content-Security-Policy lets the page load nothing from anywhere else.
- **The viewers**: one process per websocket, as in textual-serve, but started from an argument
  list (textual-serve runs `command` through a shell), each in a session of its own, so that a
  Ctrl-C typed at the server's terminal reaches the server only, which then ends every viewer
  before it exits: asked to quit as textual-serve asks it, then SIGTERM and SIGKILL to the
  viewer's process group where it does not end in time (textual-serve waits for it forever).
- **Serving** (`serve`): no banner and no access log (its lines would carry the token); the
  bound address is known before it is told (`port=0` takes a free one, `on_ready`); SIGINT,
  SIGTERM and SIGHUP (the terminal or the SSH session closed) end it alike.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shlex
import signal
from asyncio.subprocess import PIPE, Process
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import aiohttp_jinja2
from aiohttp import WSCloseCode, web
from textual_serve.app_service import AppService
from textual_serve.server import Server, to_int

from tfctl.tui.web.access import Access, guard, page_headers

log = logging.getLogger("textual-serve")

HERE = Path(__file__).parent
PAGE = "page.html"
WEBSOCKET_PATH = "/ws"
QUIT_WAIT_S = 3.0
"""How long a viewer asked to quit has before its process group gets SIGTERM."""
TERM_WAIT_S = 2.0
"""How long it has after SIGTERM before SIGKILL."""
SHUTDOWN_WAIT_S = 5.0
"""How long the server waits for requests still being answered when it ends."""

CONTENT_POLICY = ("default-src 'self'; script-src 'self' 'unsafe-inline'; "
                  "style-src 'self' 'unsafe-inline'; img-src 'self' data: blob:; "
                  "font-src 'self'; connect-src 'self'; frame-ancestors 'none'; "
                  "base-uri 'none'; form-action 'none'")
"""The page loads from its own server only ('self' covers the websocket to the same host)."""


class ViewerProcess(AppService):
    """One browser tab's dashboard process: textual-serve's `AppService`, started from
    `argv` in a session of its own, and ended for sure by `stop` (see the module)."""

    def __init__(self, argv: Sequence[str], **kwargs: Any) -> None:
        super().__init__(shlex.join(argv), **kwargs)
        self.argv = list(argv)

    async def _open_app_process(self, width: int = 80, height: int = 24) -> Process:
        self._process = process = await asyncio.create_subprocess_exec(
            *self.argv, stdin=PIPE, stdout=PIPE, stderr=PIPE,
            env=self._build_environment(width=width, height=height), start_new_session=True)
        assert process.stdin is not None
        self._stdin = process.stdin
        return process

    @property
    def pid(self) -> int | None:
        return None if self._process is None else self._process.pid

    async def stop(self) -> None:
        """Ask it to quit; what has not ended after `QUIT_WAIT_S` gets SIGTERM, then SIGKILL;
        whatever it started in its process group goes too."""
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(asyncio.shield(super().stop()), QUIT_WAIT_S)
        process = self._process
        if process is None:
            return
        for sig, wait_s in ((signal.SIGTERM, TERM_WAIT_S), (signal.SIGKILL, None)):
            if process.returncode is not None:
                break
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, sig)
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(process.wait(), wait_s)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGTERM)  # what it left in its group, if anything


class DashboardServer(Server):
    """The dashboard for browsers: `viewer_argv` runs one dashboard (per websocket);
    `on_ready(host, port)` is called once the server listens (see the module)."""

    def __init__(self, viewer_argv: Sequence[str], *, host: str, port: int, title: str,
                 on_ready: Callable[[str, int], None], access: Access | None = None) -> None:
        super().__init__(shlex.join(viewer_argv), host=host, port=port, title=title,
                         templates_path=HERE)
        self.viewer_argv = list(viewer_argv)
        self.access = access or Access.new()
        self.on_ready = on_ready
        self.sockets: set[web.WebSocketResponse] = set()
        self.viewers: set[ViewerProcess] = set()

    async def _make_app(self) -> web.Application:
        app = await super()._make_app()
        app.middlewares.append(guard(self.access, WEBSOCKET_PATH))
        app.on_response_prepare.append(page_headers)
        return app

    async def on_startup(self, app: web.Application) -> None:
        """Nothing: `serve` tells the address once it is bound (textual-serve prints a banner
        and its `public_url` here)."""

    async def on_shutdown(self, app: web.Application) -> None:
        """End every viewer, then close the websockets still open."""
        await asyncio.gather(*(v.stop() for v in list(self.viewers)), return_exceptions=True)
        await asyncio.gather(*(ws.close(code=WSCloseCode.GOING_AWAY)
                               for ws in list(self.sockets)), return_exceptions=True)

    async def handle_index(self, request: web.Request) -> web.StreamResponse:
        host = request.headers.get("Host") or f"{self.host}:{self.port}"
        context = {
            "title": self.title,
            "static": "/static/",
            "websocket_url": f"{'wss' if request.secure else 'ws'}://{host}{WEBSOCKET_PATH}",
            "font_size": to_int(request.query.get("fontsize", "16"), 16),
        }
        response = aiohttp_jinja2.render_template(PAGE, request, context)
        response.headers["Content-Security-Policy"] = CONTENT_POLICY
        response.headers["Cache-Control"] = "no-store"
        return response

    async def handle_websocket(self, request: web.Request) -> web.WebSocketResponse:
        """textual-serve's, with a `ViewerProcess` and the open ones kept for `on_shutdown`."""
        websocket = web.WebSocketResponse(heartbeat=15)
        width = to_int(request.query.get("width", "80"), 80)
        height = to_int(request.query.get("height", "24"), 24)
        viewer: ViewerProcess | None = None
        self.sockets.add(websocket)
        try:
            await websocket.prepare(request)
            viewer = ViewerProcess(self.viewer_argv, write_bytes=websocket.send_bytes,
                                   write_str=websocket.send_str, close=websocket.close,
                                   download_manager=self.download_manager, debug=self.debug)
            self.viewers.add(viewer)
            await viewer.start(width, height)
            await self._process_messages(websocket, viewer)
        except asyncio.CancelledError:
            await websocket.close()
        except Exception as error:
            log.exception(error)
        finally:
            self.sockets.discard(websocket)
            if viewer is not None:
                await viewer.stop()
                self.viewers.discard(viewer)
        return websocket

    def serve(self, debug: bool = False) -> None:
        """Serve until SIGINT, SIGTERM or SIGHUP, then end every viewer and return. An
        address that cannot be bound raises OSError."""
        self.debug = debug
        asyncio.run(self._serve())

    async def _serve(self) -> None:
        loop = asyncio.get_running_loop()
        ending = asyncio.Event()
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            loop.add_signal_handler(sig, ending.set)
        runner = web.AppRunner(await self._make_app(), access_log=None, handle_signals=False,
                               shutdown_timeout=SHUTDOWN_WAIT_S)
        await runner.setup()
        try:
            site = web.TCPSite(runner, self.host, self.port)
            await site.start()
            port = runner.addresses[0][1]
            self.on_ready(self.host, port)
            await ending.wait()
        finally:
            await runner.cleanup()
