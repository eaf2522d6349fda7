"""Processes detached from the agent's SSH session: keepers, listeners, samplers, notifiers.

Part of the agent program (`__init__.py`): stdlib only, Python >= 3.8, Linux, no tfctl imports.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable


def detach_stdio(out_path: str, keep: tuple[int, ...] = ()) -> None:
    """stdin from /dev/null, stdout+stderr appended to `out_path`, every other fd but `keep` closed.

    Nothing of the SSH session may stay open in a detached process, or SSH waits for it.
    """
    null = os.open(os.devnull, os.O_RDONLY)
    out = os.open(out_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(null, 0)
    os.dup2(out, 1)
    os.dup2(out, 2)
    for fd in [int(n) for n in os.listdir("/proc/self/fd")]:
        if fd > 2 and fd not in keep:
            try:
                os.close(fd)
            except OSError:
                continue  # the descriptor of the listing itself, already closed


def fork_detached(body: Callable[[], int], out_path: str = os.devnull,
                  keep: tuple[int, ...] = ()) -> int:
    """Run `body()` in a grandchild leading its own session; return the grandchild's pid."""
    sys.stdout.flush()
    sys.stderr.flush()
    read_end, write_end = os.pipe()
    child = os.fork()
    if child == 0:
        code = 70
        try:
            os.close(read_end)
            grandchild = os.fork()
            if grandchild:
                os.write(write_end, str(grandchild).encode())
                code = 0
            else:
                os.setsid()
                os.chdir("/")
                detach_stdio(out_path, keep)
                code = body()
        except BaseException:
            import traceback

            traceback.print_exc()
        finally:
            os._exit(code)
    os.close(write_end)
    with os.fdopen(read_end) as pipe:
        pid = int(pipe.read() or 0)
    os.waitpid(child, 0)
    return pid
