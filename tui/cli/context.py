"""What every subcommand shares: the `Context` the group builds, `obj(ctx)`, the exit codes,
where the inventory is (named, else `cluster.yaml` here or in a parent folder), and the shell
completion of host and task names (`complete_hosts`, `complete_hosts_list`,
`complete_hosts_or_tasks`).

The command modules import this, never `main.py` (which loads them lazily by name), so there
is no import cycle between the group and its commands. Cheap: click only.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

import click

if TYPE_CHECKING:
    from click.shell_completion import CompletionItem

    from tfctl.inventory.model import Inventory
    from tfctl.remote.connect.transport import SshOptions

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130
DEFAULT_INVENTORY = "cluster.yaml"


def find_upwards(name: str, start: str) -> str | None:
    """`name` in `start` or its nearest parent folder that has it (as git finds `.git`); the
    path is relative when found in `start` itself, so messages stay short."""
    folder = os.path.abspath(start)
    while True:
        candidate = os.path.join(folder, name)
        if os.path.isfile(candidate):
            return name if folder == os.path.abspath(start) else candidate
        parent = os.path.dirname(folder)
        if parent == folder:
            return None
        folder = parent


@dataclass
class Context:
    """What every command receives: where the inventory is and how to connect."""

    inventory_path: str | None
    """As given (-i, TFCTL_INVENTORY), or None: then `cluster.yaml` here or in a parent."""
    hostfile: str | None
    connect_timeout_s: float
    accept_new_host_keys: bool
    color: bool | None = None
    """--color/--no-color as given, or None; `output.colour_choice` makes the one decision."""
    persist_s: float = 0.0
    """--persist: how long the hosts' connections outlive the command (remote/connect/hold)."""

    def inventory_file(self) -> str:
        """The inventory to read: the one named, else the nearest `cluster.yaml` up the tree."""
        if self.inventory_path is not None:
            return self.inventory_path
        here = os.getcwd()
        found = find_upwards(DEFAULT_INVENTORY, here)
        if found is None:
            from tfctl.inventory.errors import InventoryError

            raise InventoryError(DEFAULT_INVENTORY, None, "", f"not found in {here} or any "
                                 "folder above it (no -i FILE, no TFCTL_INVENTORY)",
                                 "write one here with `tfctl init`, or name one with -i FILE")
        return found

    def load(self) -> Inventory:
        from tfctl.inventory.cache import load_inventory_cached

        return load_inventory_cached(self.inventory_file(), hostfile=self.hostfile)

    def ssh_options(self) -> SshOptions:
        from tfctl.remote.connect.transport import SshOptions

        return SshOptions(self.connect_timeout_s, self.accept_new_host_keys, self.persist_s)


def obj(ctx: click.Context) -> Context:
    """The shared `Context` of a subcommand."""
    value = ctx.find_object(Context)
    assert value is not None
    return value


# ---------------------------------------------------------------- shell completion

GIVEN = "tfctl.given."
"""`ctx.meta` keys of the global options given after the subcommand (main.with_global_options)."""


def command_line_context(ctx: click.Context) -> Context:
    """The `Context` the command line being completed points at (-i, --hostfile, before or after
    the subcommand, or TFCTL_INVENTORY), also while click only parses it for completion and the
    group's callback has not run."""
    shared = ctx.find_object(Context)
    if shared is not None:
        return shared
    root = ctx.find_root().params
    given = {k[len(GIVEN):]: v for k, v in ctx.meta.items() if k.startswith(GIVEN)}

    def text(name: str) -> str | None:
        value = given.get(name, root.get(name))
        return value if isinstance(value, str) else None  # not click's UNSET of a bad value

    return Context(text("inventory_path"), text("hostfile"), 5.0, False)


def complete_hosts(ctx: click.Context, param: click.Parameter,
                   incomplete: str) -> list[CompletionItem]:
    """Shell completion: the host names of the inventory (the one the command line names, else
    `cluster.yaml` here or in a parent). Never raises: a broken inventory completes nothing.

    For `shell_complete=` of click options and arguments (click's completion protocol:
    https://click.palletsprojects.com/en/stable/shell-completion/).
    """
    return _completions(ctx, incomplete)


def complete_hosts_list(ctx: click.Context, param: click.Parameter,
                        incomplete: str) -> list[CompletionItem]:
    """Shell completion of a comma-separated host list (`up --only a,b`, `exec --hosts a,b`):
    the host names after the commas already typed, those already typed left out."""
    from click.shell_completion import CompletionItem

    done, comma, tail = incomplete.rpartition(",")
    typed = set(done.split(","))
    names = (str(item.value) for item in complete_hosts(ctx, param, tail))
    return [CompletionItem(done + comma + n) for n in names if n not in typed]


def complete_hosts_or_tasks(ctx: click.Context, param: click.Parameter,
                            incomplete: str) -> list[CompletionItem]:
    """Shell completion: host names, then the planned task names (`worker:0`, `ps:1`, ...)."""
    return _completions(ctx, incomplete, tasks=True)


def complete_tasks(ctx: click.Context, param: click.Parameter,
                   incomplete: str) -> list[CompletionItem]:
    """Shell completion: the planned task names only (`tfctl logs worker:0`)."""
    return _completions(ctx, incomplete, hosts=False, tasks=True)


def _completions(ctx: click.Context, incomplete: str, hosts: bool = True,
                 tasks: bool = False) -> list[CompletionItem]:
    from click.shell_completion import CompletionItem

    try:
        names = _names(command_line_context(ctx), hosts, tasks)
        word, kept = _bash_colon_word(incomplete)
    except Exception:  # completion must never fail the shell: a broken file completes nothing
        return []
    return [CompletionItem(n[len(kept):], help=h) for n, h in names if n.startswith(word)]


def _bash_colon_word(incomplete: str) -> tuple[str, str]:
    """The word being completed, and the part of it bash keeps on the line.

    bash breaks words at `:` (it is in COMP_WORDBREAKS), so `worker:0` reaches click as
    `worker`, `:`, `0`, and bash replaces only what follows the last `:`. Rejoined here, and the
    part up to that `:` left out of the answers, as bash-completion's `__ltrim_colon_completions`
    does (bash FAQ E13; clap-rs/clap#6311). Other shells, and a bash without `:` in
    COMP_WORDBREAKS, pass the word whole: then nothing is rejoined or left out.
    """
    if os.environ.get("_TFCTL_COMPLETE") != "bash_complete":
        return incomplete, ""
    from click.shell_completion import split_arg_string

    words = split_arg_string(os.environ.get("COMP_WORDS", ""))
    i = int(os.environ.get("COMP_CWORD", "0"))
    word = incomplete
    while 2 <= i <= len(words) and (words[i - 1] == ":" or word.startswith(":")):
        word = words[i - 1] + word
        i -= 1
    if word == incomplete:
        return incomplete, ""
    return word, word[: word.rindex(":") + 1]


def _names(context: Context, hosts: bool, tasks: bool) -> list[tuple[str, str]]:
    inv = context.load()
    out = [(h.name, f"host, {len(h.gpus)} GPUs") for h in inv.hosts] if hosts else []
    if tasks:
        from tfctl.inventory.plan import make_plan

        out += [(t.name, f"task on {t.host}") for t in make_plan(inv).tasks]
    return out
