"""What Ctrl-C, SIGTERM and SIGHUP do to `tfctl up`: before the run is up, stop everything it
started, say what was stopped (and why, in the run's record) and exit 130; once it is up
(`up --wait`), leave the run running.

`rollback_on_interrupt` wraps `up`'s whole sequence (tui/cli/lifecycle.py); `UpGuard` is what the
signal handler knows of how far `up` got: the run id the hooks were told (`CliUpHooks.run_id`)
and whether the run is up (`is_up`, set by `up` once it said so).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from collections.abc import Iterator
from types import FrameType
from typing import TYPE_CHECKING

from tfctl.tui.cli.context import EXIT_INTERRUPTED
from tfctl.tui.cli.output import say

if TYPE_CHECKING:
    from tfctl.remote.controller import RunController
    from tfctl.tui.cli.setup import CliUpHooks


SIGNAL_WORDS: dict[int, str] = {signal.SIGINT: "Ctrl-C (SIGINT)", signal.SIGTERM: "SIGTERM",
                                  signal.SIGHUP: "SIGHUP: its terminal closed"}


class UpGuard:
    """How far `up` got, for its interrupt handler. The first SIGINT/SIGTERM/SIGHUP raises
    KeyboardInterrupt, its words saying which; later ones are ignored until the run is up, so a
    second Ctrl-C cannot cut the rollback short and leave half a job behind.

    SIGHUP (the terminal closed: an ssh session to the laptop dropped) is an interrupt like
    Ctrl-C: nothing half-started stays, and `tfctl runs` says why the run ended, as nobody
    reads the terminal any more. Its output goes to /dev/null from then on: a write to a hung-up
    terminal fails (EIO), which would cut the rollback short."""

    def __init__(self, hooks: CliUpHooks) -> None:
        self.hooks = hooks
        self.is_up = False
        self.signals = 0

    @property
    def run_id(self) -> str | None:
        """The run id `up` chose (set just before any task starts), or None."""
        return self.hooks.run_id

    def on_signal(self, signum: int, frame: FrameType | None) -> None:
        self.signals += 1
        if signum == signal.SIGHUP:
            silence_terminal()
        if self.signals == 1 or self.is_up:
            raise KeyboardInterrupt(f"interrupted by {SIGNAL_WORDS.get(signum, signum)} "
                                    "before it was up")


def silence_terminal() -> None:
    """stdin, stdout and stderr on /dev/null (file descriptors, so the live rows' thread and
    child processes are silenced too)."""
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        with contextlib.suppress(OSError):
            os.dup2(null, fd)
    os.close(null)


@contextlib.contextmanager
def rollback_on_interrupt(controller: RunController, hooks: CliUpHooks) -> Iterator[UpGuard]:
    """Ctrl-C/SIGTERM/SIGHUP before the run is up: stop what it started, say so (and why, in
    the run's record), exit 130."""
    from tfctl.remote.runs.up.rollback import Interrupted

    guard = UpGuard(hooks)
    previous = {sig: signal.signal(sig, guard.on_signal) for sig in SIGNAL_WORDS
                if signal.getsignal(sig) != signal.SIG_IGN}  # `nohup tfctl up` stays up
    try:
        yield guard
    except KeyboardInterrupt as exc:
        if guard.is_up:
            say(f"interrupted: run {guard.run_id} keeps running · `tfctl down` stops it")
        elif guard.run_id is None:
            say("interrupted before any task was started: nothing to clean up")
        elif not isinstance(exc, Interrupted):  # else up rolled back and said so
            say(f"interrupted: {controller.rollback(guard.run_id, cause=str(exc) or None)}")
        sys.exit(EXIT_INTERRUPTED)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
