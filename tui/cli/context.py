"""What every subcommand shares: the `Context` the group builds, `obj(ctx)`, the exit codes.

The command modules import this, never `main.py` (which loads them lazily by name), so there
is no import cycle between the group and its commands. Cheap: click only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import click

if TYPE_CHECKING:
    from tfctl.inventory.model import Inventory
    from tfctl.remote.connect.transport import SshOptions

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130


@dataclass
class Context:
    """What every command receives: where the inventory is and how to connect."""

    inventory_path: str
    hostfile: str | None
    connect_timeout_s: float
    accept_new_host_keys: bool

    def load(self) -> Inventory:
        from tfctl.inventory.cache import load_inventory_cached

        return load_inventory_cached(self.inventory_path, hostfile=self.hostfile)

    def ssh_options(self) -> SshOptions:
        from tfctl.remote.connect.transport import SshOptions

        return SshOptions(self.connect_timeout_s, self.accept_new_host_keys)


def obj(ctx: click.Context) -> Context:
    """The shared `Context` of a subcommand."""
    value = ctx.find_object(Context)
    assert value is not None
    return value
