"""`tfctl gpus`: every GPU of every host, which task owns it, and what looks wrong — once or live.

The data comes from `tfctl.remote.gpus.telemetry.TelemetryHub` (one nvidia-smi stream per host), the
owners from the agents' task pids (`tfctl.remote.gpus.owners`), the warnings from
`tfctl.remote.gpus.findings`; this module only chooses columns, colours and refresh.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

import click

from tfctl.tui.cli.main import EXIT_FAILED, obj

if TYPE_CHECKING:
    from rich.console import RenderableType

    from tfctl.remote.gpus.findings import Finding
    from tfctl.remote.gpus.history import HostTelemetry
    from tfctl.remote.gpus.owners import Owner, OwnerCache

OWNER_REFRESH_S = 5.0  # task pids change only when tasks start or stop
UTIL_STYLE = ((90.0, "green"), (50.0, "yellow"), (0.0, "dim"))
STATE_STYLE = {"ok": "green", "stale": "yellow", "no_gpus": "dim", "error": "red"}


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list, one object per GPU.")
@click.option("--watch", is_flag=True, help="Refresh the table in place until Ctrl-C.")
@click.option("--interval", type=float, default=1.0, show_default=True,
              help="Seconds between samples (nvidia-smi averages over about 1 s anyway).")
@click.option("--first-sample-timeout", type=float, default=20.0, show_default=True,
              help="Seconds to wait for every host's first sample.")
@click.pass_context
def gpus(ctx: click.Context, as_json: bool, watch: bool, interval: float,
         first_sample_timeout: float) -> None:
    """Every GPU of every host: utilization, memory, temperature, power, and its owner task.

    A GPU's owner is the run's task whose process is on it, "foreign pid N user X" for anyone
    else's process, or "idle". Hosts without nvidia-smi say "no GPUs" once.

    \b
    Example:
      tfctl gpus
      tfctl gpus --watch
      tfctl gpus --json | jq '.[] | select(.owner_kind == "foreign")'
    """
    from tfctl.remote.connect.fleet import Fleet
    from tfctl.remote.gpus.findings import all_findings, track_logs
    from tfctl.remote.gpus.owners import OwnerCache
    from tfctl.remote.gpus.telemetry import TelemetryHub
    from tfctl.remote.runs.current import current_run

    c = obj(ctx)
    inv = c.load()
    with Fleet(inv, c.ssh_options()) as fleet:
        hub = TelemetryHub(fleet, interval_ms=max(100, round(interval * 1000)))
        cache = OwnerCache(fleet, hub.snapshots)
        hub.start()
        try:
            run = current_run(inv, fleet)
            run_id, hosts = (run.run_id, list(run.hosts)) if run else (None, [])
            hub.wait_first(first_sample_timeout + c.connect_timeout_s)
            cache.refresh(run_id, hosts)
            if not watch:
                snaps = hub.snapshots()
                now = hub.clock()
                found = all_findings(snaps, hub.history, cache.tasks, {}, now)
                if as_json:
                    click.echo(json.dumps(gpu_objects(snaps, cache.owners(snaps), now), indent=2))
                else:
                    _print(render(snaps, cache.owners(snaps), found, now, run_id))
                if any(s.state(now).value == "error" for s in snaps.values()):
                    sys.exit(EXIT_FAILED)
                return
            stop = threading.Event()
            refresher = threading.Thread(target=_refresh_owners, daemon=True,
                                         args=(cache, run_id, hosts, stop))
            refresher.start()
            marks: dict[Any, Any] = {}
            try:
                from rich.live import Live

                with Live(auto_refresh=False, screen=False, transient=as_json) as live:
                    while True:
                        snaps, now = hub.snapshots(), hub.clock()
                        marks = track_logs(marks, cache.tasks, now)
                        owners = cache.owners(snaps)
                        if as_json:  # one JSON list per line, for `jq --seq` and friends
                            click.echo(json.dumps(gpu_objects(snaps, owners, now)))
                        else:
                            found = all_findings(snaps, hub.history, cache.tasks, marks, now)
                            live.update(render(snaps, owners, found, now, run_id), refresh=True)
                        time.sleep(interval)
            except KeyboardInterrupt:
                return
            finally:
                stop.set()
        finally:
            hub.stop()


def _refresh_owners(cache: OwnerCache, run_id: str | None, hosts: list[str],
                    stop: threading.Event) -> None:
    """Re-read the run's task pids now and then (hosts that fail keep no pids until back)."""
    while not stop.wait(OWNER_REFRESH_S):
        cache.refresh(run_id, hosts)


def _print(renderable: RenderableType) -> None:
    from rich.console import Console

    Console(highlight=False).print(renderable)


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


def render(snapshots: Mapping[str, HostTelemetry], owners: Mapping[tuple[str, str], Owner],
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
            table.add_row(host, "–", Text(note, style=STATE_STYLE[state]), *[""] * 5)
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
