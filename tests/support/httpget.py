"""HTTP GETs as a browser makes them, for the tests of what a tunnel serves."""

from __future__ import annotations

import time
import urllib.error
import urllib.request


def get(url: str, timeout: float = 10.0) -> tuple[int, bytes]:
    with urllib.request.urlopen(url, timeout=timeout) as answer:
        return answer.status, answer.read()


def get_eventually(url: str, within_s: float) -> tuple[int, bytes]:
    """GET until it answers (a browser retries the same way); the last error if it never does."""
    deadline = time.monotonic() + within_s
    while True:
        try:
            return get(url, timeout=5.0)
        except (OSError, urllib.error.URLError):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)
