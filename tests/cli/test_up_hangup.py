"""`up`'s interrupt guard (tui/cli/interrupts.py) and SIGHUP, in a process of its own: a closing
terminal interrupts `up` like Ctrl-C, silently (nobody reads the terminal); `nohup tfctl up`
(SIGHUP ignored) is not interrupted by it. On the lab, with a real terminal closing:
tests/testbed/test_interrupts.py::test_terminal_closed_while_workers_start_stops_everything."""

from __future__ import annotations

import subprocess
import sys

from tests.support.signals import from_a_terminal

PROBE = """
import os, signal, sys, time
if sys.argv[1] == "nohup":
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
from tfctl.tui.cli.interrupts import rollback_on_interrupt
from tfctl.tui.cli.setup import CliUpHooks
with rollback_on_interrupt(None, CliUpHooks()):
    print("guarded", flush=True)
    os.kill(os.getpid(), signal.SIGHUP)
    time.sleep(0.5)
    print("still up", flush=True)
print("handler after:", signal.getsignal(signal.SIGHUP) == signal.SIG_IGN, flush=True)
"""


def probe(mode: str) -> subprocess.CompletedProcess[str]:
    """The probe started as a terminal's foreground job (SIGHUP at its default, whatever this
    suite was started with); `nohup` ignores it in the probe itself."""
    return subprocess.run([sys.executable, "-c", PROBE, mode], capture_output=True, text=True,
                          timeout=60, preexec_fn=from_a_terminal)


def test_sighup_interrupts_up_and_silences_its_terminal() -> None:
    hung = probe("terminal")
    assert hung.returncode == 130  # EXIT_INTERRUPTED, as Ctrl-C
    assert hung.stdout == "guarded\n"  # what it said after the hangup went to /dev/null
    assert hung.stderr == ""  # "interrupted before any task was started", unseen; no traceback


def test_nohup_keeps_up_going() -> None:
    kept = probe("nohup")
    assert kept.returncode == 0, kept.stderr
    assert kept.stdout == "guarded\nstill up\nhandler after: True\n"
