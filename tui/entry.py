"""The `tfctl` program's first code (the console script's and `python -m tfctl.tui`'s): Ctrl-C at
any moment, the start-up imports included, ends it quietly, `interrupted` and exit 130.

Python raises KeyboardInterrupt for SIGINT wherever the program is; while `tui/cli/main.py` is
still importing click and the rest, no handler of tfctl's exists yet, and that ended in a
traceback. So `run` first takes SIGINT over, with a handler that ends the process at once
(nothing has started yet, nothing is to be undone); this module imports nothing but the
interpreter's built-in `_signal`, so only the interpreter's start and the import of this file
come before it. A command gets Python's own KeyboardInterrupt back when its group starts it
(`TfctlGroup.invoke`), where tfctl's handling of Ctrl-C is, and SIGINT is quiet again once it
has returned (for the exit: `main.run`). A SIGINT the program was started with ignored
(`nohup`, a non-interactive shell's `&`) stays ignored (README: Signals are taken as the shell
gave them).

What runs before this module cannot be guarded from Python: the interpreter's own start (until
it sets its SIGINT handler, SIGINT ends it silently by default: a shell says 130) and its
`site` import (the environment's `.pth` files), where Python reports a KeyboardInterrupt as a
fatal error of its own.
"""

import _signal  # built into the interpreter, imported at its start: no import runs here


def quiet_interrupt(signum: int, frame: object) -> None:
    """SIGINT outside a command: `interrupted`, exit 130, at once (os._exit: no traceback, and
    nothing of tfctl's yet, or any longer, to let go)."""
    import os

    try:
        os.write(2, b"interrupted\n")
    finally:
        os._exit(130)


def take_sigint() -> None:
    """SIGINT ends the program quietly (`quiet_interrupt`) from now on, unless it is ignored."""
    if _signal.getsignal(_signal.SIGINT) != _signal.SIG_IGN:
        _signal.signal(_signal.SIGINT, quiet_interrupt)


def give_sigint_back() -> bool:
    """SIGINT raises KeyboardInterrupt again where `take_sigint` took it (a command's own
    handling of Ctrl-C starts here), and True; otherwise it stays as it is (a test's
    in-process run), and False."""
    if _signal.getsignal(_signal.SIGINT) is not quiet_interrupt:
        return False
    _signal.signal(_signal.SIGINT, _signal.default_int_handler)
    return True


def run() -> None:
    """`tfctl`: `main.run`, imported under `quiet_interrupt`."""
    take_sigint()
    from tfctl.tui.cli.main import run as run_main

    run_main()
