"""Signals as a terminal gives them: what a test that sends SIGINT or SIGHUP gives its child.

A shell starts a foreground job with SIGINT and SIGHUP at their defaults, and that is what
Ctrl-C and a closing terminal act on. The suite itself may have been started with them ignored
(`scripts/test &` from a non-interactive shell, `nohup`, some CI runners), and a child inherits
an ignored signal: tfctl keeps it ignored (README: Signals), so a test of Ctrl-C would then test
nothing. Such a test starts its command with `preexec_fn=from_a_terminal`.
"""

from __future__ import annotations

import signal

TERMINAL_SIGNALS = (signal.SIGINT, signal.SIGHUP)


def from_a_terminal() -> None:
    """SIGINT and SIGHUP back at their defaults (run in the child, before its program)."""
    for sig in TERMINAL_SIGNALS:
        signal.signal(sig, signal.SIG_DFL)
