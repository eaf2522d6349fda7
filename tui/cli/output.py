"""What the headless commands print: `say` (progress on stderr) and the rich tables (plan,
status, GPUs) and the GPUs' JSON.

Display choices (colours, column order, what counts as a warning) live here, not in `remote/`.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

import click

if TYPE_CHECKING:
    from rich.console import Console, RenderableType

    from tfctl.inventory.plan import Plan
    from tfctl.remote.gpus.findings import Finding
    from tfctl.remote.gpus.history import HostTelemetry
    from tfctl.remote.gpus.owners import Owner
    from tfctl.remote.runs.status import RunStatus

STATE_STYLE = {"running": "green", "exited": "yellow", "killed": "red", "lost": "red",
               "stopped": "dim", "starting": "cyan", "unreachable": "red"}


def say(text: str, who: str = "tfctl") -> None:
    """One line of progress on stderr: `tfctl: text` (`demo: text` for `tfctl demo`)."""
    click.echo(click.style(f"{who}: ", fg="cyan") + text, err=True)


def warn(text: str) -> None:
    """`tfctl: warning: text` on stderr."""
    say(click.style("warning: ", fg="yellow") + text)


def say_event(text: str) -> None:
    """A controller event line: `say`, with a leading `warning: ` in yellow."""
    if text.startswith("warning: "):
        warn(text[len("warning: "):])
    else:
        say(text)


def report_failures(failed: Iterable[object]) -> None:
    """One red `✖` line per error (with its output tail where it has one), on stderr."""
    for exc in failed:
        full = getattr(exc, "full", None)
        click.secho(f"  ✖ {full() if callable(full) else exc}", fg="red", err=True)


@functools.lru_cache(maxsize=1)
def _console() -> Console:
    from rich.console import Console  # rich only for the tables, not for `tfctl --help`

    return Console(highlight=False)


def plan_table(plan: Plan) -> None:
    from rich.table import Table
    from rich.text import Text

    console = _console()
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
    from rich.table import Table
    from rich.text import Text

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
    _console().print(table)


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "–"
    s = int(seconds)
    if s >= 3600:
        return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}"
    return f"{s // 60}:{s % 60:02d}"


# ---------------------------------------------------------------- `tfctl gpus`

UTIL_STYLE = ((90.0, "green"), (50.0, "yellow"), (0.0, "dim"))
GPU_STATE_STYLE = {"ok": "green", "stale": "yellow", "no_gpus": "dim", "error": "red"}


def print_renderable(renderable: RenderableType) -> None:
    _console().print(renderable)


def gpu_objects(snapshots: Mapping[str, HostTelemetry], owners: Mapping[tuple[str, str], Owner],
                now: float) -> list[dict[str, Any]]:
    """One JSON object per GPU; a host with none (or failing) gets one object with `uuid` null."""
    out: list[dict[str, Any]] = []
    for host, snap in snapshots.items():
        head = {"host": host, "state": snap.state(now).value, "error": snap.error,
                "staleness_s": _round(snap.staleness_s(now))}
        if not snap.gpus:
            out.append({**head, "index": None, "uuid": None, "owner": None, "owner_kind": None})
            continue
        for gpu in snap.gpus:
            owner = owners.get((host, gpu.uuid))
            out.append({
                **head, **asdict(gpu),
                "owner": owner.label if owner else None,
                "owner_kind": owner.kind if owner else None,
                "tasks": list(owner.tasks) if owner else [],
                "planned": list(owner.planned) if owner else [],
                "foreign": [asdict(p) for p in owner.foreign] if owner else [],
                "processes": [asdict(p) for p in snap.processes_on(gpu.uuid)],
            })
    return out


def gpu_table(snapshots: Mapping[str, HostTelemetry], owners: Mapping[tuple[str, str], Owner],
           findings: Sequence[Finding], now: float, run_id: str | None) -> RenderableType:
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    table = Table(show_edge=False, pad_edge=False,
                  title=f"run {run_id}" if run_id else "no run", title_justify="left")
    for col in ("host", "gpu", "name", "util", "memory", "temp", "power", "task"):
        table.add_column(col, justify="right" if col in ("gpu", "util", "temp", "power")
                         else "left", no_wrap=col != "task")
    for host, snap in snapshots.items():
        state = snap.state(now).value
        if not snap.gpus or state != "ok":
            note = {"no_gpus": "no GPUs", "stale": _stale_note(snap, now)}.get(
                state, f"{snap.error}")
            table.add_row(host, "–", Text(note, style=GPU_STATE_STYLE[state]), *[""] * 5)
        for gpu in snap.gpus:
            owner = owners.get((host, gpu.uuid))
            util = gpu.utilization_gpu_pct
            table.add_row(
                host if state == "ok" else Text(host, style="dim"),
                str(gpu.index if gpu.index is not None else "?"), _short(gpu.name),
                Text(_num(util, "%"), style=_util_style(util)),
                f"{_gib(gpu.memory_used_mib)}/{_gib(gpu.memory_total_mib)}G",
                _num(gpu.temperature_c, "°C"), _num(gpu.power_draw_w, "W"),
                Text(owner.label if owner else "?",
                     style="red" if owner and owner.foreign else ""))
    lines = [Text(("✖ " if f.level == "error" else "⚠ ") + f.text,
                  style="red" if f.level == "error" else "yellow") for f in findings]
    return Group(table, *lines)


def _stale_note(snap: HostTelemetry, now: float) -> str:
    age = snap.staleness_s(now)
    return "waiting for the first sample" if age is None else f"no sample for {age:.0f} s"


def _util_style(util: float | None) -> str:
    if util is None:
        return "dim"
    return next(style for threshold, style in UTIL_STYLE if util >= threshold)


def _num(value: float | None, unit: str) -> str:
    return "n/a" if value is None else f"{value:.0f}{unit}"


def _gib(mib: float | None) -> str:
    return "?" if mib is None else f"{mib / 1024:.1f}"


def _short(name: str | None) -> str:
    return (name or "?").removeprefix("NVIDIA ").removeprefix("GeForce ")


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 3)
