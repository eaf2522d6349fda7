"""Rich tables for the headless commands (plan, status, check): what the terminal shows.

Display choices (colours, column order, what counts as a warning) live here, not in `remote/`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.console import Console
from rich.table import Table

if TYPE_CHECKING:
    from tfctl.inventory.plan import Plan

console = Console(highlight=False)
err_console = Console(stderr=True, highlight=False)

STATE_STYLE = {"running": "green", "exited": "yellow", "killed": "red", "lost": "red",
               "stopped": "dim", "starting": "cyan", "unreachable": "red"}


def plan_table(plan: Plan) -> None:
    inv = plan.inventory
    console.print(f"[bold]{inv.name}[/] · style {inv.job.style} · {len(inv.hosts)} hosts · "
                  f"{len(plan.tasks)} tasks")
    for kind in ("ps", "worker", "chief"):
        if kind in plan.cluster:
            console.print(f"  {kind}_hosts={','.join(plan.cluster[kind])}", soft_wrap=True)
    table = Table(show_edge=False, pad_edge=False)
    for col in ("task", "host", "address", "port", "mask", "command"):
        table.add_column(col, overflow="fold")
    for t in plan.tasks:
        mask = repr(t.cuda_visible_devices) if t.cuda_visible_devices == "" \
            else t.cuda_visible_devices
        table.add_row(t.name, t.host, t.address, str(t.port or "–"), mask, t.command)
    console.print(table)
    for w in plan.warnings:
        console.print(f"[yellow]warning:[/] {w}")
