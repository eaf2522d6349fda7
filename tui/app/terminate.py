"""SIGTERM ends the dashboard as `q` does: the app exits through its own loop (its workers
stopped, the terminal given back, out of the alternate screen), then the command ends as an
interrupted one (`interrupted (SIGTERM)`, exit 130). `tfctl demo` ends its dashboard so on
SIGINT and SIGHUP too, then stops everything it started.

Textual's terminal driver leaves SIGTERM to Python, whose default ends the process on the
spot, the terminal left in the dashboard's modes; a KeyboardInterrupt raised into the event
loop may stop it half-way. So the handler only asks the loop, from the signal, to call
`App.exit` (`call_soon_threadsafe`, which wakes the loop). SIGHUP means the terminal is gone:
the standard streams go to /dev/null first, as a write to a hung-up terminal fails (EIO) and
would cut the exit short. A signal the command was started with ignored stays ignored (README:
Signals are taken as the shell gave them).
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import threading
from collections.abc import Iterator, Sequence
from types import FrameType
from typing import Any


def _name(signum: int) -> str:
    """`SIGTERM`: the words of the KeyboardInterrupt a signal ends the dashboard with."""
    try:
        return signal.Signals(signum).name
    except ValueError:
        return str(signum)


@contextlib.contextmanager
def exit_on_signals(app: Any, signals: Sequence[int]) -> Iterator[None]:
    """While `app` runs: each of `signals` not ignored exits it; once it has,
    KeyboardInterrupt naming the first (`SIGTERM`). Later ones while it exits change nothing."""
    from tfctl.tui.cli.interrupts import silence_terminal

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.getsignal(sig) for sig in signals}
    taken = [sig for sig, was in previous.items() if was != signal.SIG_IGN]
    told: list[int] = []

    def handler(signum: int, frame: FrameType | None) -> None:
        told.append(signum)
        if signum == signal.SIGHUP:
            silence_terminal()
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # not running yet, or no longer
            raise KeyboardInterrupt(_name(told[0])) from None
        loop.call_soon_threadsafe(app.exit)

    for sig in taken:
        signal.signal(sig, handler)
    try:
        yield
    finally:
        for sig in taken:
            signal.signal(sig, previous[sig])
    if told:
        raise KeyboardInterrupt(_name(told[0]))
