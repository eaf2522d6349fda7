"""`tfctl wait --notify URL`: word of the run's end from the client, sent through apprise.

A local-transport run (this machine) and an HTTP receiver on 127.0.0.1 that apprise's `json://`
scheme POSTs to, as it would to any JSON webhook."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from tests.support.localcluster import local_cluster, run_tfctl


def _receiver() -> tuple[ThreadingHTTPServer, list[dict[str, Any]]]:
    got: list[dict[str, Any]] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            got.append({"path": self.path, "json": json.loads(body)})
            self.send_response(200)
            self.end_headers()

        def log_message(self, *_args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, got


def test_wait_sends_the_end_through_apprise(tmp_path: Path) -> None:
    inv = local_cluster(tmp_path, {"a": {"ps": 1}}, {"args": ["--steps", "5"]})
    up = run_tfctl(inv, "up")
    assert up.returncode == 0, up.stderr
    server, got = _receiver()
    try:
        url = f"json://127.0.0.1:{server.server_address[1]}/hook"
        waited = run_tfctl(inv, "wait", "--timeout", "60", "--notify", url)
    finally:
        server.shutdown()
        server.server_close()
        run_tfctl(inv, "down", "--grace", "1")
    assert waited.returncode == 0, waited.stderr
    run_id = waited.stderr.split("run ", 1)[1].split()[0]
    assert len(got) == 1 and got[0]["path"] == "/hook", got
    word = got[0]["json"]
    assert word["title"] == f"tfctl run {run_id} finished"
    assert word["message"].startswith(f"run {run_id} finished with exit status 0")
    assert word["type"] == "success"


def test_a_url_apprise_cannot_read_is_refused_before_waiting(tmp_path: Path) -> None:
    inv = local_cluster(tmp_path, {"a": {"ps": 1}})
    proc = run_tfctl(inv, "wait", "--notify", "nosuchscheme://x")
    assert proc.returncode == 2
    assert "nosuchscheme://x is not a URL apprise can send to" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_an_unreachable_url_is_said_not_fatal(tmp_path: Path) -> None:
    inv = local_cluster(tmp_path, {"a": {"ps": 1}}, {"args": ["--steps", "2"]})
    assert run_tfctl(inv, "up").returncode == 0
    try:
        waited = run_tfctl(inv, "wait", "--timeout", "60", "--notify", "json://127.0.0.1:9/x")
    finally:
        run_tfctl(inv, "down", "--grace", "1")
    assert waited.returncode == 0, waited.stderr  # the job's own exit status
    assert "could not send word to json://… (apprise)" in waited.stderr
