"""What the headless commands print: `say` (progress on stderr), the rich tables (plan, status,
GPUs), the JSON, and the one decision about colour.

Colour (`colour_choice`): `--color`/`--no-color` wins, else `NO_COLOR` set to anything but ""
turns it off (https://no-color.org), else each stream is coloured when it is a terminal. Every
message goes through it: `say`, `echo` and friends pass it to click, `console()` builds rich's
consoles with it, and the group sets it on click's context for the commands that call
`click.secho` themselves (click.Context.color, https://click.palletsprojects.com/en/stable/api/).

While a live progress view runs (`tfctl.tui.progress`), `set_sink` routes these lines above it,
so nothing printed today is lost on a terminal. Display choices (colours, column order, what
counts as a warning) live here, not in `remote/`.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

import click

from tfctl.tui.cli.context import Context

if TYPE_CHECKING:
    from rich.console import Console, RenderableType

    from tfctl.inventory.plan import Plan
    from tfctl.remote.errors import RemoteError
    from tfctl.remote.gpus.findings import Finding
    from tfctl.remote.gpus.lastseen import HostTelemetry
    from tfctl.remote.gpus.owners import Owner
    from tfctl.remote.runs.status import RunStatus, TaskStatus
    from tfctl.remote.silence import Silence
    from tfctl.tui.progress import Steps

STATE_STYLE = {"running": "green", "exited": "yellow", "killed": "red", "lost": "red",
               "stopped": "dim", "starting": "cyan", "unreachable": "red"}
Sink = Callable[[str, bool], None]
_sink: Sink | None = None
_flag: bool | None = None
"""--color/--no-color as last seen in click's context, for lines said from the fleet's threads
(click's context is per thread)."""


# ---------------------------------------------------------------- colour

def colour_choice() -> bool | None:
    """True/False when colour is decided for every stream (flag, then NO_COLOR); None: each
    stream is coloured if it is a terminal."""
    global _flag
    ctx = click.get_current_context(silent=True)
    if ctx is not None:
        shared = ctx.find_object(Context)
        _flag = shared.color if shared is not None else None
    if _flag is not None:
        return _flag
    if os.environ.get("NO_COLOR", ""):
        return False
    return None


def colour_enabled(err: bool = False) -> bool:
    """Whether a line on stderr (`err`) or stdout gets colour now."""
    choice = colour_choice()
    if choice is not None:
        return choice
    return _isatty(sys.stderr if err else sys.stdout)


def _isatty(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


def console(stderr: bool = False) -> Console:
    """A rich console for stdout (or stderr) that follows `colour_choice`."""
    return _console(stderr, colour_choice(), _isatty(sys.stderr if stderr else sys.stdout))


@functools.lru_cache(maxsize=8)
def _console(stderr: bool, choice: bool | None, tty: bool) -> Console:
    from rich.console import Console  # rich only for the tables, not for `tfctl --help`

    if choice is None:
        return Console(highlight=False, stderr=stderr)
    if choice:
        return Console(highlight=False, stderr=stderr, force_terminal=True,
                       color_system="auto" if tty else "standard")
    return Console(highlight=False, stderr=stderr, color_system=None, no_color=True)


# ---------------------------------------------------------------- lines

def set_sink(sink: Sink | None) -> None:
    """Route every line of this module to `sink(line, err)` (a live view), or back (None)."""
    global _sink
    _sink = sink


def echo(text: str, err: bool = False) -> None:
    """One line on stdout (or stderr), coloured or not by `colour_choice`."""
    sink = _sink
    if sink is not None:
        sink(text, err)
    else:
        click.echo(text, err=err, color=colour_choice())


def secho(text: str, err: bool = False, **style: Any) -> None:
    echo(click.style(text, **style), err=err)


def live_wanted() -> bool:
    """Live rows only where a person watches: stdout and stderr both terminals, TERM not dumb."""
    return _isatty(sys.stdout) and _isatty(sys.stderr) and os.environ.get("TERM") != "dumb"


@contextlib.contextmanager
def live_steps(title: str, hosts: Sequence[str], steps: Sequence[str],
               task_hosts: Mapping[str, str] | None = None,
               launch_hosts: Sequence[str] | None = None, enabled: bool = True
               ) -> Iterator[Steps | None]:
    """Live rows (`tfctl.tui.progress`) under the lines this module prints, erased at the end;
    None (plain lines only) when not `enabled` or not `live_wanted()`."""
    if not enabled or not live_wanted():
        yield None
        return
    from tfctl.tui.progress import LiveView, Rows, Steps

    rows = Rows()
    tracker = Steps(rows, hosts, steps, task_hosts, launch_hosts)
    with LiveView(rows, title, console(stderr=True)) as view:
        set_sink(view.print_above)
        try:
            yield tracker
        finally:
            set_sink(None)


def print_json(data: Any) -> None:
    """One JSON object on one line of stdout (`--json`; the README's "Machine-readable
    output" gives each command's)."""
    click.echo(json.dumps(data, default=str))


def say(text: str, who: str = "tfctl") -> None:
    """One line of progress on stderr: `tfctl: text` (`demo: text` for `tfctl demo`)."""
    echo(click.style(f"{who}: ", fg="cyan") + text, err=True)


def warn(text: str) -> None:
    """`tfctl: warning: text` on stderr."""
    say(click.style("warning: ", fg="yellow") + text)


def say_event(text: str) -> None:
    """A controller event line: `say`, with a leading `warning: ` in yellow."""
    if text.startswith("warning: "):
        warn(text[len("warning: "):])
    else:
        say(text)


def report_failures(failed: Iterable[RemoteError]) -> None:
    """One red `✖` line per error (with its output tail where it has one), on stderr."""
    for exc in failed:
        secho(f"  ✖ {exc.full()}", err=True, fg="red")


def error_line(exc: object) -> str:
    """An error's one-line message (no output tail), for stderr under `--json`."""
    return f"error: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}"


def plan_table(plan: Plan) -> None:
    from rich.table import Table
    from rich.text import Text

    from tfctl.inventory.frameworks import framework_of

    out = console()
    inv = plan.inventory
    framework = framework_of(inv.job)
    roles = framework.roles
    out.print(f"[bold]{inv.name}[/] · {framework.summary(inv.job)} · {len(inv.hosts)} hosts · "
              f"{len(plan.tasks)} tasks")
    for kind in (*roles, *(k for k in plan.cluster if k not in roles)):
        if kind in plan.cluster:
            name = f"{kind}_hosts" if kind in roles else kind
            out.print(f"  {name}={','.join(plan.cluster[kind])}", soft_wrap=True)
    from tfctl.inventory.frameworks.gloo import shown as shown_value

    shared, own = handed_columns(plan, framework.shown_env)
    if shared:
        out.print("  " + " ".join(f"{k}={v}" for k, v in shared.items()), soft_wrap=True)
    table = Table(show_edge=False, pad_edge=False)
    for col in ("task", "host", "address", "port", "mask", *(["env"] if own else []),
                "command"):
        table.add_column(col, overflow="fold")
    free = {h.name: h.free_gpus for h in inv.hosts if h.free_gpus is not None}
    for t in plan.tasks:
        mask = repr(t.cuda_visible_devices) if t.cuda_visible_devices == "" \
            else "free" if t.host in free else t.cuda_visible_devices
        env = [" ".join(f"{k}={shown_value(t.env[k])}" for k in own if k in t.env)] \
            if own else []
        table.add_row(t.name, t.host, t.address, str(t.port or "–"), mask, *env,
                      Text(t.command))
    out.print(table)
    chosen = [k for k in roles if any(t.type == k and t.port_chosen_at_up for t in plan.tasks)]
    if chosen:
        low, high = inv.job.ports.free_range
        out.print(f"ports of {', '.join(chosen)} are chosen at up from {low}-{high}: each task "
                  "keeps the port shown where it is free on its host, else takes a free one "
                  "(job.ports fixes them)", soft_wrap=True)
    for host, wanted in free.items():
        out.print(f"{host}: {wanted.words()} (one worker each); `tfctl plan --now` shows "
                  "which they would be now", soft_wrap=True)
    for w in plan.warnings:
        out.print(f"[yellow]warning:[/] {w}")


def handed_columns(plan: Plan, shown: Sequence[str]) -> tuple[dict[str, str], list[str]]:
    """Of the variables the framework hands that the plan shows (`Framework.shown_env`): those
    every task that has them holds alike (said once, above the table), and the names of those
    that differ (a column)."""
    from tfctl.inventory.frameworks.gloo import shown as shown_value

    values: dict[str, set[str]] = {}
    for task in plan.tasks:
        for key in shown:
            if key in task.env:
                values.setdefault(key, set()).add(shown_value(task.env[key]))
    shared = {k: next(iter(v)) for k, v in values.items() if len(v) == 1}
    return shared, [k for k in shown if k in values and k not in shared]


def status_table(st: RunStatus, patterns: Sequence[str] = ()) -> None:
    """The tasks, each running training task with the speed its last lines state, read as the
    recorder and the dashboard read it (`patterns`: the job's `throughput:` regexes)."""
    from rich.table import Table
    from rich.text import Text

    from tfctl.remote.lab.idle import idle_words
    from tfctl.remote.runs.status import records_words, taken_back_words

    table = Table(show_edge=False, pad_edge=False)
    for col in ("task", "host", "pid", "state", "up", "restarts", "steps/s", "last line"):
        table.add_column(col, overflow="ellipsis", no_wrap=col != "last line")
    for t in st.tasks:
        style = STATE_STYLE.get(t.state, "")
        table.add_row(t.name, t.host, str(t.pid or "–"), Text(t.describe(), style=style),
                      _duration(t.uptime_s), str(t.restarts), _speed(task_speed(t, patterns)),
                      Text(t.last_line[-70:]))
    for host, why in st.unreachable.items():
        table.add_row("*", host, "–", Text("unreachable", style="red"), "–", "–", "–",
                      Text(why[-70:]))
    console().print(table)
    if (where := directories_line(st.tasks)) is not None:
        echo(where)
    for host in st.unreachable:  # in full below the table, whose columns would cut it short
        secho(f"{host} {st.reach_words(host, time.time())}: its tasks are unknown", fg="red")
    for silence in st.silences:  # the host answers us, not the chief: its tasks keep running
        secho(silence.words(time.time()), fg="yellow")
    for host, state in st.records_stopped.items():
        secho(records_words(host, state), fg="yellow")
    for host, taken in st.taken_back.items():
        secho(taken_back_words(host, taken), fg="yellow")
    for host, state in st.idle.items():  # warned by the lab's policy: stopped unless used
        secho(idle_words(host, state, time.time()), fg="yellow")
    _say_lost_to_restarts(st)


def directories_line(tasks: Sequence[TaskStatus]) -> str | None:
    """Below the status table, where the tasks run: `working directory: ~/w` when they all
    share one, else each directory with its tasks; None where no task's is known."""
    by_dir: dict[str, list[str]] = {}
    for t in tasks:
        if t.cwd:
            by_dir.setdefault(t.cwd, []).append(t.name)
    if not by_dir:
        return None
    if len(by_dir) == 1:
        return f"working directory: {next(iter(by_dir))}"
    return "working directories: " + "; ".join(f"{cwd} ({', '.join(names)})"
                                               for cwd, names in by_dir.items())


def _say_lost_to_restarts(st: RunStatus) -> None:
    """Below the status table: each host that restarted under the run, and what to do."""
    from tfctl.remote.runs.relaunch import lost_words

    for host in st.lost_to_restarts:
        secho(lost_words(st, host), fg="red")


def task_speed(task: TaskStatus, patterns: Sequence[str] = ()) -> tuple[float, str] | None:
    """The speed a running task's newest log lines state (`tfctl.remote.agent.speed`), if any."""
    from tfctl.remote.agent.speed import SpeedReader

    if task.state != "running":
        return None
    reader = SpeedReader(patterns)
    for line in reversed(task.last_lines or (task.last_line,)):
        found = reader.value(line)
        if found is not None:
            return found
    return None


def _speed(found: tuple[float, str] | None) -> str:
    if found is None:
        return "–"
    value, unit = found
    number = f"{value:.1f}" if value < 1000 else f"{value:.0f}"
    return number if unit == "steps/s" else f"{number} {unit}"


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
    console().print(renderable)


def gpu_objects(snapshots: Mapping[str, HostTelemetry], owners: Mapping[tuple[str, str], Owner],
                now: float, silences: Sequence[Silence] = ()) -> list[dict[str, Any]]:
    """One JSON object per GPU; a host with none (or failing) gets one object with `uuid` null.
    `silences`: the chief's port its host's watcher cannot reach (`tfctl.remote.silence`)."""
    out: list[dict[str, Any]] = []
    for host, snap in snapshots.items():
        head = {"host": host, "state": snap.state(now).value, "error": snap.error,
                "staleness_s": _round(snap.staleness_s(now)), **snap.reach_json(now, time.time()),
                "silences": [s.to_json(time.time()) for s in silences if s.host == host]}
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

    from tfctl.remote.gpus.findings import FindingKind

    table = Table(show_edge=False, pad_edge=False,
                  title=f"run {run_id}" if run_id else "no run", title_justify="left")
    for col in ("host", "gpu", "name", "util", "memory", "temp", "power", "task"):
        table.add_column(col, justify="right" if col in ("gpu", "util", "temp", "power")
                         else "left", no_wrap=col != "task")
    for host, snap in snapshots.items():
        state = snap.state(now).value
        if not snap.gpus or state != "ok":
            note = "unreachable" if snap.unreachable else {
                "no_gpus": "no GPUs", "stale": _stale_note(snap, now)}.get(state, f"{snap.error}")
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
    silent = [Text(f"✖ {host} {words}: its GPUs show their last samples", style="red")
              for host, snap in snapshots.items() if (words := snap.reach_words(now, time.time()))]
    lines = [Text(("✖ " if f.level == "error" else "⚠ ") + f.text,
                  style="red" if f.level == "error" else "yellow") for f in findings
             if not (silent and f.kind is FindingKind.STREAM_UNREACHABLE)]
    return Group(table, *silent, *lines)


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
