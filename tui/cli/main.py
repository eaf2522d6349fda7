"""The `tfctl` command line: thin click commands over `tfctl.inventory` and `tfctl.remote`.

Heavy imports (paramiko, textual) happen inside the commands that need them, so `tfctl --help` and
`tfctl plan` start fast. Errors of the project are caught once, here, and printed as one
sentence: exit 2 for usage and inventory mistakes, 1 for a failure on a host, 130 for Ctrl-C.
"""

from __future__ import annotations

import sys
from typing import Any

import click

from tfctl.tui.cli.context import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE, Context, obj

# Commands import these from `tfctl.tui.cli.context` (no cycle with this module); re-exported
# for code written against main.
__all__ = ["COMMANDS", "EXIT_FAILED", "EXIT_INTERRUPTED", "EXIT_OK", "EXIT_USAGE", "Context",
           "main", "obj", "run"]


class TfctlGroup(click.Group):
    """Lazy subcommands; the project's errors become one line and a named exit code."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return [n for n in COMMANDS if _available(n)]

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in COMMANDS or not _available(name):
            return None
        return _lazy_command(*COMMANDS[name])

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt:
            click.echo("interrupted", err=True)
            sys.exit(EXIT_INTERRUPTED)
        except click.exceptions.Exit:
            raise
        except click.ClickException:
            raise
        except Exception as exc:
            code = _project_error_code(exc)
            if code is None:
                raise
            click.secho(f"error: {_message(exc)}", fg="red", err=True)
            sys.exit(code)


def _project_error_code(exc: Exception) -> int | None:
    from tfctl.inventory.errors import InventoryError

    if isinstance(exc, InventoryError):
        return EXIT_USAGE
    remote_errors = sys.modules.get("tfctl.remote.errors")
    if remote_errors is not None and isinstance(exc, remote_errors.RemoteError):
        return EXIT_FAILED
    return None


def _message(exc: Exception) -> str:
    full = getattr(exc, "full", None)
    return full() if callable(full) else str(exc)


@click.group(cls=TfctlGroup, invoke_without_command=True,
             context_settings={"help_option_names": ["-h", "--help"]})
@click.option("-i", "--inventory", "inventory_path", envvar="TFCTL_INVENTORY",
              default="cluster.yaml", show_default=True, metavar="FILE",
              help="The cluster inventory (or set TFCTL_INVENTORY).")
@click.option("--hostfile", metavar="FILE",
              help="Take the hosts from a machinefile (`h slots=4`) or `h1:4,h2:2` file.")
@click.option("--connect-timeout", "connect_timeout_s", type=click.FloatRange(min=0.1),
              default=5.0,
              show_default=True, envvar="TFCTL_CONNECT_TIMEOUT", help="SSH connect timeout, s.")
@click.option("--accept-new-host-keys", is_flag=True,
              help="Record host keys not yet in known_hosts (a changed key is always refused).")
@click.version_option("0.1.0", prog_name="tfctl")
@click.pass_context
def main(ctx: click.Context, inventory_path: str, hostfile: str | None,
         connect_timeout_s: float, accept_new_host_keys: bool) -> None:
    """Run distributed TensorFlow on your lab's GPU machines from one inventory file.

    \b
    Example:
      tfctl -i cluster.yaml plan      # what would run where, nothing contacted
      tfctl check                     # preflight every host
      tfctl up && tfctl ui            # start the job, watch it
      tfctl down                      # stop exactly what `up` started
    """
    ctx.obj = Context(inventory_path, hostfile, connect_timeout_s, accept_new_host_keys)
    if ctx.invoked_subcommand is None:
        ctx.invoke(_lazy_command("tfctl.tui.cli.ui", "ui"))


def run() -> None:
    """The `tfctl` program: `main`, then an exit without the interpreter's module teardown.

    Tearing down paramiko's and cryptography's modules costs ~20 ms at the end of every command
    (`python -c "import paramiko"`: 117 ms, 94 ms ending in `os._exit`), a tenth of a no-change
    `tfctl sync`. What must happen at exit still does: atexit handlers run (temporary folders,
    logging) and the standard streams are flushed (a failed flush exits 120, as Python does).
    While a thread that is not a daemon still runs, the normal exit waits for it instead.
    """
    import atexit
    import os
    import threading

    try:
        main(prog_name="tfctl")
        code: Any = 0
    except SystemExit as exc:
        code = exc.code
    if any(t.is_alive() and not t.daemon for t in threading.enumerate()
           if t is not threading.main_thread()):
        sys.exit(code)
    if code is not None and not isinstance(code, int):
        print(code, file=sys.stderr)
        code = 1
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            code = code or 120
    os._exit(code or 0)


def _lazy_command(module: str, name: str) -> click.Command:
    import importlib

    command: click.Command = getattr(importlib.import_module(module), name)
    return command


# Subcommands live in their own modules, imported only when that command (or --help) needs them;
# those modules keep paramiko/textual imports inside their functions.
COMMANDS: dict[str, tuple[str, str]] = {
    "plan": ("tfctl.tui.cli.plan", "plan"),
    "init": ("tfctl.tui.cli.init", "init"),
    "check": ("tfctl.tui.cli.check", "check"),
    "sync": ("tfctl.tui.cli.run", "sync"),
    "setup": ("tfctl.tui.cli.setup", "setup"),
    "up": ("tfctl.tui.cli.run", "up"),
    "wait": ("tfctl.tui.cli.run", "wait"),
    "status": ("tfctl.tui.cli.run", "status"),
    "down": ("tfctl.tui.cli.run", "down"),
    "logs": ("tfctl.tui.cli.logs", "logs"),
    "exec": ("tfctl.tui.cli.logs", "exec_"),
    "collect": ("tfctl.tui.cli.history", "collect"),
    "runs": ("tfctl.tui.cli.history", "runs"),
    "report": ("tfctl.tui.cli.history", "report"),
    "demo": ("tfctl.tui.cli.demo", "demo"),
    "tensorboard": ("tfctl.tui.cli.tensorboard", "tensorboard"),
    "gpus": ("tfctl.tui.cli.gpus", "gpus"),
    "ui": ("tfctl.tui.cli.ui", "ui"),
}


def _available(name: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(COMMANDS[name][0]) is not None
