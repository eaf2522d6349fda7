"""The `tfctl` command line: thin click commands over `tfctl.inventory` and `tfctl.remote`.

Heavy imports (paramiko, textual) happen inside the commands that need them, so `tfctl --help` and
`tfctl plan` start fast. Errors of the project are caught once, here, and printed as one
sentence: exit 2 for usage and inventory mistakes, 1 for a failure on a host, 130 for Ctrl-C.
The group's options are also taken after the subcommand (`with_global_options`), and click's
own shell completion (`_TFCTL_COMPLETE=bash_source tfctl`) completes commands, options and,
through `context.complete_hosts`, the inventory's names.
"""

from __future__ import annotations

import sys
import types
from typing import Any

import click

from tfctl.tui.cli.context import (
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_USAGE,
    GIVEN,
    Context,
    obj,
)

# Commands import these from `tfctl.tui.cli.context` (no cycle with this module); re-exported
# for code written against main.
__all__ = ["COMMANDS", "DISTRIBUTION", "EXIT_FAILED", "EXIT_INTERRUPTED", "EXIT_OK", "EXIT_USAGE",
           "Context", "main", "obj", "run"]

DISTRIBUTION = "tfctl-lab"
"""The name tfctl is installed under (pyproject.toml's `project.name`; `tfctl` on PyPI is another
project): `--version` reads the installed version from its metadata, written only in
pyproject.toml."""


class TfctlGroup(click.Group):
    """Lazy subcommands; the project's errors become one line and a named exit code."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return [n for n in COMMANDS if _available(n)]

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in COMMANDS or not _available(name):
            return None
        return with_global_options(_lazy_command(*COMMANDS[name]))

    def invoke(self, ctx: click.Context) -> Any:
        """The command run, its Ctrl-C a KeyboardInterrupt, ending it with `interrupted` and exit
        130. Started by tfctl's program (tui/entry.py, which then holds SIGINT quiet until
        here), SIGINT is quiet again once the command has returned; run in process (a test's
        CliRunner) it is left alone."""
        entry = sys.modules.get("tfctl.tui.entry")  # imported only by the program: no cycle
        taken = False
        try:
            taken = entry is not None and entry.give_sigint_back()
            terminate_as_interrupt()
            return super().invoke(ctx)
        except KeyboardInterrupt as exc:
            click.echo(f"interrupted ({exc})" if str(exc) else "interrupted", err=True)
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
        finally:
            if taken and entry is not None:
                entry.take_sigint()


def terminate_as_interrupt() -> None:
    """SIGTERM ends a command as Ctrl-C does: a KeyboardInterrupt, so what it holds is let go
    (its agent sessions closed, a follower's polling ended) and it exits 130, where Python's
    default would end it on the spot. A command with its own handling (`up`'s rollback, the
    dashboard, the queue's waiter) installs it over this one. A SIGTERM the command was
    started with ignored stays ignored, as SIGINT and SIGHUP do: tfctl keeps the dispositions
    its shell gave it (README: Signals)."""
    import contextlib
    import signal

    def interrupt(signum: int, frame: types.FrameType | None) -> None:
        raise KeyboardInterrupt("SIGTERM")

    if signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
        with contextlib.suppress(ValueError):  # not the main thread (a test's CliRunner)
            signal.signal(signal.SIGTERM, interrupt)


def _project_error_code(exc: Exception) -> int | None:
    from tfctl.inventory.errors import InventoryError

    if isinstance(exc, InventoryError):
        return EXIT_USAGE
    remote_errors = sys.modules.get("tfctl.remote.errors")
    if remote_errors is not None and isinstance(exc, remote_errors.RemoteError):
        return EXIT_FAILED
    return None


def _message(exc: Exception) -> str:
    """The error's sentence; a host's error with its command's last lines (`full()`)."""
    from tfctl.remote.errors import RemoteError

    return exc.full() if isinstance(exc, RemoteError) else str(exc)


@click.group(cls=TfctlGroup, invoke_without_command=True,
             context_settings={"help_option_names": ["-h", "--help"]})
@click.option("-i", "--inventory", "inventory_path", envvar="TFCTL_INVENTORY", metavar="FILE",
              help="The cluster inventory (or set TFCTL_INVENTORY; default: cluster.yaml here "
                   "or in a parent folder).")
@click.option("--hostfile", metavar="FILE",
              help="Take the hosts from a machinefile (`h slots=4`) or `h1:4,h2:2` file.")
@click.option("--connect-timeout", "connect_timeout_s", type=click.FloatRange(min=0.1),
              default=5.0,
              show_default=True, envvar="TFCTL_CONNECT_TIMEOUT", help="SSH connect timeout, s.")
@click.option("--accept-new-host-keys", is_flag=True,
              help="Record host keys not yet in known_hosts (a changed key is always refused).")
@click.option("--persist", "persist_s", type=click.FloatRange(min=0), default=60.0,
              show_default=True, envvar="TFCTL_PERSIST", metavar="SECONDS",
              help="Keep the hosts' connections and agent sessions this long after a command, "
                   "for the next one (as ssh's ControlPersist); 0: never.")
@click.option("--color/--no-color", "color", default=None,
              help="Colour the output even when it is not a terminal, or never (default: on a "
                   "terminal, unless NO_COLOR is set).")
@click.version_option(package_name=DISTRIBUTION, prog_name="tfctl")
@click.pass_context
def main(ctx: click.Context, inventory_path: str | None, hostfile: str | None,
         connect_timeout_s: float, accept_new_host_keys: bool, persist_s: float,
         color: bool | None) -> None:
    """Run distributed TensorFlow on your lab's GPU machines from one inventory file.

    The options below are accepted after the subcommand too (`tfctl up -i lab.yaml`).

    \b
    Example:
      tfctl plan -i cluster.yaml      # what would run where, nothing contacted
      tfctl check                     # preflight every host
      tfctl up && tfctl ui            # start the job, watch it
      tfctl down                      # stop exactly what `up` started
    """
    ctx.obj = Context(inventory_path, hostfile, connect_timeout_s, accept_new_host_keys, color,
                      persist_s)
    _apply_colour(ctx)
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


def with_global_options(command: click.Command) -> click.Command:
    """`command`, also taking the group's options after its name, where people type them.

    `tfctl up -i lab.yaml` as well as `tfctl -i lab.yaml up`, as git, kubectl and ssh accept
    them. The copies take no value of their own (no default, no environment variable): one given
    after the subcommand overrides the group's `Context`, which already holds the value given
    before it, or the environment's, or the default. A spelling the command already uses for an
    option of its own stays the command's. Added once per command object (and to the commands
    of a group, `tfctl export -i lab.yaml slurm`); `--help` lists them as "Global options".
    """
    if getattr(command, "_tfctl_globals", False):
        return command
    taken = {opt for param in command.params for opt in (*param.opts, *param.secondary_opts)}
    for param in main.params:
        if isinstance(param, click.Option) and param.name != "version":
            copy = _after_subcommand(param, taken)
            if copy is not None:
                command.params.append(copy)
    if isinstance(command, click.Group):
        for sub in command.commands.values():
            with_global_options(sub)
    command.format_options = types.MethodType(_format_options, command)  # type: ignore[method-assign]
    command._tfctl_globals = True  # type: ignore[attr-defined]
    return command


class GlobalOption(click.Option):
    """A copy of one of `main`'s options on a subcommand (`with_global_options`)."""


def _after_subcommand(option: click.Option, taken: set[str]) -> GlobalOption | None:
    name = option.name or ""

    def override(ctx: click.Context, param: click.Parameter, value: Any) -> None:
        if value is None or (value is False and not option.secondary_opts):
            return  # not given after the subcommand: the group's value stands
        ctx.meta[GIVEN + name] = value  # for completion, where the group's callback never ran
        shared = ctx.find_object(Context)
        if shared is not None:
            setattr(shared, name, value)
        if name == "color":
            _apply_colour(ctx)

    opts = [o for o in option.opts if o not in taken]
    if option.secondary_opts:  # --color/--no-color: both spellings free, or none
        if opts != option.opts or any(o in taken for o in option.secondary_opts):
            return None
        opts = [f"{option.opts[-1]}/{option.secondary_opts[-1]}"]
    if not opts:
        return None
    # Its own parameter name: a command's option of the same name (init's `hostfile`) stays apart.
    return GlobalOption([*opts, f"tfctl_global_{name}"], type=option.type, is_flag=option.is_flag,
                        metavar=option.metavar,
                        default=None if not option.is_flag or option.secondary_opts else False,
                        expose_value=False, callback=override, help=option.help)


def _format_options(self: click.Command, ctx: click.Context,
                    formatter: click.HelpFormatter) -> None:
    """click's `Command.format_options`, with the copies of the group's options apart."""
    rows: dict[bool, list[tuple[str, str]]] = {False: [], True: []}
    for param in self.get_params(ctx):
        record = param.get_help_record(ctx)
        if record is not None and not isinstance(param, click.Argument):
            rows[isinstance(param, GlobalOption)].append(record)
    for title, records in (("Options", rows[False]),
                           ("Global options (before or after the command)", rows[True])):
        if records:
            with formatter.section(title):
                formatter.write_dl(records)
    if isinstance(self, click.Group):
        self.format_commands(ctx, formatter)


def _apply_colour(ctx: click.Context) -> None:
    """The one colour decision (`output.colour_choice`) on click's contexts, for every
    `click.secho` of the commands (click.Context.color)."""
    from tfctl.tui.cli.output import colour_choice

    choice = colour_choice()
    here: click.Context | None = ctx
    while here is not None:
        here.color = choice
        here = here.parent


def _lazy_command(module: str, name: str) -> click.Command:
    import importlib

    command: click.Command = getattr(importlib.import_module(module), name)
    return command


# Subcommands live in their own modules, imported only when that command (or --help) needs them;
# those modules keep paramiko/textual imports inside their functions.
COMMANDS: dict[str, tuple[str, str]] = {
    "plan": ("tfctl.tui.cli.plan", "plan"),
    "export": ("tfctl.tui.cli.plan", "export"),
    "init": ("tfctl.tui.cli.init", "init"),
    "check": ("tfctl.tui.cli.check", "check"),
    "sync": ("tfctl.tui.cli.lifecycle", "sync"),
    "setup": ("tfctl.tui.cli.setup", "setup"),
    "up": ("tfctl.tui.cli.lifecycle", "up"),
    "run": ("tfctl.tui.cli.run", "run"),
    "notebook": ("tfctl.tui.cli.session", "notebook"),
    "shell": ("tfctl.tui.cli.session", "shell"),
    "wait": ("tfctl.tui.cli.lifecycle", "wait"),
    "status": ("tfctl.tui.cli.lifecycle", "status"),
    "down": ("tfctl.tui.cli.lifecycle", "down"),
    "restart": ("tfctl.tui.cli.restart", "restart"),
    "logs": ("tfctl.tui.cli.logs", "logs"),
    "exec": ("tfctl.tui.cli.logs", "exec_"),
    "ssh": ("tfctl.tui.cli.logs", "ssh"),
    "disconnect": ("tfctl.tui.cli.connections", "disconnect"),
    "collect": ("tfctl.tui.cli.history", "collect"),
    "runs": ("tfctl.tui.cli.history", "runs"),
    "report": ("tfctl.tui.cli.history", "report"),
    "demo": ("tfctl.tui.cli.demo", "demo"),
    "tensorboard": ("tfctl.tui.cli.tensorboard", "tensorboard"),
    "gpus": ("tfctl.tui.cli.gpus", "gpus"),
    "lab": ("tfctl.tui.cli.lab", "lab"),
    "usage": ("tfctl.tui.cli.usage", "usage"),
    "reserve": ("tfctl.tui.cli.lab", "reserve"),
    "release": ("tfctl.tui.cli.lab", "release"),
    "queue": ("tfctl.tui.cli.queue", "queue"),
    "ui": ("tfctl.tui.cli.ui", "ui"),
}


def _available(name: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(COMMANDS[name][0]) is not None
