"""Who may use the served dashboard: whoever opened the address `tfctl ui --web` printed.

textual-serve has no authentication (textual-serve#41) and accepts a websocket from any page
(it does not check Origin), so any local user, or any web page open in the user's browser, could
drive the dashboard through a port it reaches. Here, as aiohttp middleware (`guard`):

- a token per start (`secrets`), printed once in the address; the server never writes it into
  a viewer's command line or environment, nor into a log (it keeps no access log);
- `GET /?token=…` with the token gets a cookie holding another secret of this start (HttpOnly,
  SameSite=Strict, Path=/), and a small page that goes on at once to the same URL without the
  token (`location.replace`, so the token leaves the address bar and the tab's history). Not a
  303: where the address was opened from a link on another site, the redirected request is
  still that site's navigation and a browser leaves a SameSite=Strict cookie off it;
- every request without that cookie gets 403: the page, its scripts and fonts, downloads and
  the websocket;
- the websocket also needs an `Origin` equal to the page's own, `http://` and the Host the
  browser sent: browsers always send it, and a page of another site cannot set it.

The token stays valid while the server runs, so the printed address works in any browser (a
second person, a second laptop), as Jupyter's token does. The cookie's name carries a random id
of this start: browsers keep cookies per host, not per port, so two servers on one machine
each keep their own.
"""

from __future__ import annotations

import html
import json
import secrets
from collections.abc import Mapping
from dataclasses import dataclass

from aiohttp import web
from aiohttp.typedefs import Handler, Middleware

COOKIE_PREFIX = "tfctl-ui-"
TOKEN_PARAM = "token"

_GO_ON = """<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>tfctl</title>
<meta http-equiv="refresh" content="0; url={attr}">
<script>location.replace({js});</script></head>
<body><a href="{attr}">the dashboard</a></body></html>
"""
"""The answer to the token: on to `/` without it (the script replaces the history entry; the
refresh and the link are for a browser without scripts)."""


@dataclass(frozen=True)
class Access:
    """This start's secrets: the token of the printed address and the cookie it buys."""

    token: str
    cookie_name: str
    cookie_value: str

    @classmethod
    def new(cls) -> Access:
        return cls(secrets.token_urlsafe(24), COOKIE_PREFIX + secrets.token_hex(4),
                   secrets.token_urlsafe(32))

    def has_cookie(self, cookies: Mapping[str, str]) -> bool:
        return secrets.compare_digest(cookies.get(self.cookie_name, "").encode(),
                                      self.cookie_value.encode())

    def is_token(self, given: str) -> bool:
        return secrets.compare_digest(given.encode(), self.token.encode())


def same_origin(origin: str | None, scheme: str, host: str | None) -> bool:
    """Whether a websocket's `Origin` is the page's own: its scheme and the Host header the
    browser sent (whatever port a tunnel gave it)."""
    return bool(origin) and bool(host) and origin == f"{scheme}://{host}"


def refused(why: str) -> web.Response:
    return web.Response(status=403, text=f"403 Forbidden: {why}\n")


def guard(access: Access, websocket_path: str) -> Middleware:
    """The middleware that lets through only this start's browsers (see the module)."""

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        given = request.query.get(TOKEN_PARAM)
        if request.path == "/" and given is not None and access.is_token(given):
            return _exchange(access, request)  # with a cookie too: the token leaves the URL
        if not access.has_cookie(request.cookies):
            return refused("open the address `tfctl ui --web` printed, with its ?token=")
        if request.path == websocket_path and not same_origin(
                request.headers.get("Origin"), request.scheme, request.headers.get("Host")):
            return refused("this websocket comes from another site's page")
        return await handler(request)

    return middleware


def _exchange(access: Access, request: web.Request) -> web.Response:
    """The cookie for the token, and on to the same URL without it."""
    target = str(request.rel_url.with_query(
        [(k, v) for k, v in request.query.items() if k != TOKEN_PARAM]))
    page = _GO_ON.format(attr=html.escape(target),
                         js=json.dumps(target).replace("<", "\\u003c"))
    answer = web.Response(text=page, content_type="text/html",
                          headers={"Cache-Control": "no-store"})
    answer.set_cookie(access.cookie_name, access.cookie_value, path="/", httponly=True,
                      samesite="Strict")
    return answer


async def page_headers(request: web.Request, response: web.StreamResponse) -> None:
    """Every answer: not framed by another site's page, no Referer with the address, no type
    sniffing (aiohttp's `on_response_prepare`)."""
    response.headers.setdefault("X-Frame-Options", "DENY")
    response.headers.setdefault("Referrer-Policy", "no-referrer")
    response.headers.setdefault("X-Content-Type-Options", "nosniff")
