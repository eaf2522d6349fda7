"""A terminal on a host (`tfctl ssh HOST|TASK`): a shell, or one command, in the workdir.

Why over tfctl's own connection and not by exec'ing the system `ssh`: the session must go
through exactly the settings and host-key policy every other command uses, on every hop. With
`ssh -J`, options given on the command line (UserKnownHostsFile, StrictHostKeyChecking) apply to
the destination only, not to the jump hosts ("configuration directives supplied on the
command-line generally apply to the destination host and not any specified jump hosts", ssh(1)
on -J), so a pinned policy could not be guaranteed there; and a `transport: local` host has no
sshd at all. So: a session channel of the host's connection, with a pty when our own stdin and
stdout are a terminal (the local tty in raw mode, its size followed on SIGWINCH, as ssh does),
plain pipes otherwise; the command's exit status is returned. The raw paramiko channel under
the host's Fabric Connection, not Fabric's `run(pty=True)`: invoke reads a terminal one byte
per 10 ms (`Runner.input_sleep`), about 100 characters a second for a pasted line, and keeps
the local terminal in cbreak rather than raw mode, so Ctrl-Z or Ctrl-Backslash would act locally.

For a task the environment the plan gives it (TF_CONFIG, CUDA_VISIBLE_DEVICES, the
inventory's env) is exported before the shell or command starts; never TFCTL_RUN_ID or
TFCTL_TASK: tfctl finds a run's processes by those, and `tfctl down` must not take this shell
for a task.
"""

from __future__ import annotations

import contextlib
import os
import re
import select
import shlex
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Mapping, Sequence
from typing import Any

from tfctl.remote.connect.transport import Transport, shell_path
from tfctl.remote.errors import HostUnreachable, RemoteError

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
SKIPPED_ENV = ("TFCTL_RUN_ID", "TFCTL_TASK")


def session_line(workdir: str, env: Mapping[str, str], command: Sequence[str]) -> str:
    """The remote shell line: into `workdir`, `env` exported, then `command` (argv, quoted
    word by word) or a login shell. A missing workdir fails a command (exit 1) and leaves a
    shell in the home folder, each with one line saying why."""
    where = shell_path(workdir)
    missing = shlex.quote(f"tfctl: no folder {workdir} on this host yet (`tfctl sync` makes it)")
    parts: list[str] = []
    if command:
        parts.append(f"{{ cd {where} 2>/dev/null || {{ echo {missing} >&2; exit 1; }}; }}")
    else:
        parts.append(f"{{ cd {where} 2>/dev/null || echo {missing} >&2; }}")
    exports = [f"{k}={shlex.quote(str(v))}" for k, v in env.items()
               if k not in SKIPPED_ENV and _NAME.match(k)]
    if exports:
        parts.append("export " + " ".join(exports))
    parts.append(shlex.join(command) if command else 'exec "${SHELL:-/bin/sh}" -l')
    return "; ".join(parts)


def run_session(transport: Transport, line: str, *, stdin: Any = None, stdout: Any = None,
                stderr: Any = None) -> int:
    """Run `line` on the transport's host with our standard streams joined to it; its exit
    status. The streams default to the process's own (what a terminal user has)."""
    stdin = stdin if stdin is not None else sys.stdin
    stdout = stdout if stdout is not None else sys.stdout
    stderr = stderr if stderr is not None else sys.stderr
    for stream in (stdout, stderr):
        with contextlib.suppress(OSError, ValueError, AttributeError):
            stream.flush()
    link = transport.paramiko_transport
    if link is None:  # a `transport: local` host: this machine
        return subprocess.call(["/bin/sh", "-c", line], stdin=stdin, stdout=stdout,
                               stderr=stderr)
    channel = link.open_session(timeout=transport.options.connect_timeout_s)
    try:
        terminal = _isatty(stdin) and _isatty(stdout)
        if terminal:
            size = shutil.get_terminal_size()
            channel.get_pty(term=os.environ.get("TERM", "xterm"), width=size.columns,
                            height=size.lines)
        channel.exec_command(line)
        if terminal:
            _interactive(channel, stdin.fileno(), stdout.fileno())
        else:
            _piped(channel, stdin, stdout, stderr)
        code: int = channel.recv_exit_status()
        if code == -1:
            from tfctl.remote.connect.ssh import link_lost

            if link_lost(channel):
                raise HostUnreachable(transport.host.name,
                                      "the SSH connection dropped during the session")
            raise RemoteError(transport.host.name, "the session ended without an exit status "
                              "(killed by a signal?)")
        return code
    finally:
        channel.close()


def _isatty(stream: Any) -> bool:
    try:
        return os.isatty(stream.fileno())
    except (AttributeError, OSError, ValueError):
        return False


def _interactive(channel: Any, fd_in: int, fd_out: int) -> None:
    """Bytes both ways with the local terminal in raw mode (so Ctrl-C, Tab and editors reach
    the remote pty) until the remote side closes; the terminal is restored whatever happens."""
    import termios
    import tty

    saved = termios.tcgetattr(fd_in)
    previous = None

    def resized(*_: object) -> None:
        size = shutil.get_terminal_size()
        with contextlib.suppress(Exception):
            channel.resize_pty(width=size.columns, height=size.lines)

    with contextlib.suppress(ValueError):  # not the main thread: the size is kept as it was
        previous = signal.signal(signal.SIGWINCH, resized)
    try:
        tty.setraw(fd_in, termios.TCSADRAIN)  # keep what was typed ahead, as ssh does
        stdin_open = True
        while True:
            ready = select.select([channel, fd_in] if stdin_open else [channel], [], [])[0]
            if channel in ready:
                data = channel.recv(65536)
                if not data:
                    break
                _write_all(fd_out, data)
            if fd_in in ready:
                data = os.read(fd_in, 4096)
                if data:
                    channel.sendall(data)
                else:
                    stdin_open = False
                    channel.shutdown_write()
    finally:
        termios.tcsetattr(fd_in, termios.TCSADRAIN, saved)
        if previous is not None:
            signal.signal(signal.SIGWINCH, previous)


def _piped(channel: Any, stdin: Any, stdout: Any, stderr: Any) -> None:
    """No terminal: stdin is copied to the command (then EOF), stdout and stderr kept apart."""

    def upstream() -> None:
        try:
            source = getattr(stdin, "buffer", stdin)
            while data := source.read1(65536) if hasattr(source, "read1") else source.read(
                    65536):
                channel.sendall(data)
        except (OSError, ValueError, EOFError):
            pass
        finally:
            with contextlib.suppress(Exception):
                channel.shutdown_write()

    pump = threading.Thread(target=upstream, name="tfctl-ssh-stdin", daemon=True)
    pump.start()
    out = getattr(stdout, "buffer", stdout)
    err = getattr(stderr, "buffer", stderr)
    while True:
        select.select([channel], [], [], 0.5)
        got = False
        while channel.recv_ready():
            out.write(channel.recv(65536))
            got = True
        while channel.recv_stderr_ready():
            err.write(channel.recv_stderr(65536))
            got = True
        if got:
            out.flush()
            err.flush()
        elif (channel.exit_status_ready() or (channel.closed and channel.eof_received)) \
                and not channel.recv_ready() and not channel.recv_stderr_ready():
            break


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]
