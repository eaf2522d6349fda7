"""Rich tables for the headless commands (plan, status, check): what the terminal shows.

Display choices (colours, column order, what counts as a warning) live here, not in `remote/`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.console import Console
from rich.table import Table
from rich.text import Text

if TYPE_CHECKING:
    from tfctl.inventory.plan import Plan
    from tfctl.remote.runs.status import RunStatus

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
        table.add_row(t.name, t.host, t.address, str(t.port or "–"), mask, Text(t.command))
    console.print(table)
    for w in plan.warnings:
        console.print(f"[yellow]warning:[/] {w}")


def status_table(st: RunStatus) -> None:
    table = Table(show_edge=False, pad_edge=False)
    for col in ("task", "host", "pid", "state", "up", "restarts", "last line"):
        table.add_column(col, overflow="ellipsis", no_wrap=col != "last line")
    for t in st.tasks:
        style = STATE_STYLE.get(t.state, "")
        table.add_row(t.name, t.host, str(t.pid or "–"), Text(t.describe(), style=style),
                      _duration(t.uptime_s), str(t.restarts), Text(t.last_line[-70:]))
    for host, why in st.unreachable.items():
        table.add_row("*", host, "–", Text("unreachable", style="red"), "–", "–",
                      Text(why[-70:]))
    console.print(table)


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "–"
    s = int(seconds)
    if s >= 3600:
        return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}"
    return f"{s // 60}:{s % 60:02d}"
