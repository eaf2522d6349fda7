"""`tfctl ui --web`: the dashboard served to browsers, one dashboard process per browser tab,
every tab reading one set of sources.

textual-serve (Textualize/textual-serve) does the serving; this package fits it to a lab reached
over SSH: access.py (a token per start, exchanged for a cookie; the websocket's Origin checked),
server.py (textual-serve's `Server` with pages and URLs built from the request, nothing loaded
from the internet, viewer processes that end with the server), page.html (the page), hub.py
(the server's one set of the dashboard's sources, polled once for every tab), hubreads.py
(what the hub keeps for the tabs), hubsources.py (a tab's sources, asking the hub), hubwire.py
(the hub's socket and what crosses it), viewer.py (what a viewer process changes of the
terminal dashboard). Only `ui --web` imports server.py and access.py (and through them aiohttp
and textual-serve); the others import neither.
"""
