"""SIGTERM ends the dashboard as `q` does: the app exits through its own loop (its workers
stopped, the terminal given back, out of the alternate screen), then the command ends as an
interrupted one (`interrupted (SIGTERM)`, exit 130).

Textual's terminal driver leaves SIGTERM to Python, whose default ends the process on the
spot, the terminal left in the dashboard's modes; a KeyboardInterrupt raised into the event
loop may stop it half-way. So the handler only asks the loop, from the signal, to call
`App.exit` (`call_soon_threadsafe`, which wakes the loop). A SIGTERM the command was started
with ignored stays ignored (README: Signals are taken as the shell gave them).
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import threading
from collections.abc import Iterator
from types import FrameType
from typing import Any


@contextlib.contextmanager
def exit_on_sigterm(app: Any) -> Iterator[None]:
    """While `app` runs: SIGTERM exits it; once it has, KeyboardInterrupt("SIGTERM")."""
    previous = signal.getsignal(signal.SIGTERM)
    if previous == signal.SIG_IGN or threading.current_thread() is not threading.main_thread():
        yield
        return
    told: list[int] = []

    def handler(signum: int, frame: FrameType | None) -> None:
        told.append(signum)
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # not running yet, or no longer
            raise KeyboardInterrupt("SIGTERM") from None
        loop.call_soon_threadsafe(app.exit)

    signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
    if told:
        raise KeyboardInterrupt("SIGTERM")
