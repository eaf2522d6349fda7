"""Live progress on a terminal for `sync`, `setup`, `up` and `down`: one row per host, what it
waits for, and for how long (`h2  starting worker:1  3.2 s`).

The rows are fed by what the plain mode already prints: the controller's event lines
(`sync h1: unchanged`, `setup h2: [1/2] pip install …`, `starting ps:0, worker:0`) and the
CLI's step hooks (sync ended, setup ended, run id chosen). `Steps` turns those into rows;
`LiveView` draws them with rich's `Live` (https://rich.readthedocs.io/en/stable/live.html),
transient, so that when it ends only the lines remain: every line the plain mode prints is
printed above the rows as it comes (`LiveView.print_above`), nothing is lost. The CLI uses it
only when stdout and stderr are both terminals and `--json` is not given; otherwise the plain
lines are all there is.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.console import Console, RenderableType

Clock = Callable[[], float]
_HOST_EVENT = re.compile(r"^(sync|setup) (\S+): (.*)$")
_STOPPING = re.compile(r"^stopping run (\S+) on (.+?) \((.*)\)$")
_STEP_TEXT = {"sync": "sync: comparing files", "setup": "setup: waiting for its shell",
              "gpus": "checking its GPUs are free"}


@dataclass
class Row:
    text: str
    since: float
    ended: float | None = None
    failed: bool = False


class Rows:
    """Rows by host (thread-safe: the controller's events come from the fleet's threads)."""

    def __init__(self, clock: Clock = time.monotonic) -> None:
        self.clock = clock
        self.started = clock()
        self._rows: dict[str, Row] = {}
        self._lock = threading.Lock()

    def begin(self, key: str, text: str) -> None:
        """`key` now waits for `text`; its clock starts again."""
        with self._lock:
            self._rows[key] = Row(text, self.clock())

    def note(self, key: str, text: str) -> None:
        """A new text for a row that goes on waiting (its clock keeps running)."""
        with self._lock:
            row = self._rows.get(key)
            if row is None or row.ended is not None:
                self._rows[key] = Row(text, self.clock())
            else:
                row.text = text

    def end(self, key: str, text: str | None = None, failed: bool = False) -> None:
        """`key` is done (its time stops); `text` replaces what it said."""
        with self._lock:
            row = self._rows.setdefault(key, Row(text or "", self.clock()))
            if row.ended is None:
                row.ended = self.clock()
            row.text = text if text is not None else row.text
            row.failed = row.failed or failed

    def end_all(self, keys: Iterable[str] | None = None) -> None:
        with self._lock:
            now = self.clock()
            for key, row in self._rows.items():
                if row.ended is None and (keys is None or key in keys):
                    row.ended = now

    def waiting(self, key: str) -> bool:
        with self._lock:
            row = self._rows.get(key)
            return row is not None and row.ended is None

    def text(self, key: str) -> str:
        with self._lock:
            row = self._rows.get(key)
            return row.text if row is not None else ""

    def snapshot(self) -> list[tuple[str, str, float, str]]:
        """(key, text, seconds, state) per row in the order they appeared; state is `wait`,
        `done` or `failed`."""
        with self._lock:
            now = self.clock()
            return [(key, row.text, (row.ended if row.ended is not None else now) - row.since,
                     "wait" if row.ended is None else "failed" if row.failed else "done")
                    for key, row in self._rows.items()]


MARKS = {"wait": ("…", "cyan"), "done": ("✔", "green"), "failed": ("✖", "red")}


def render(rows: Rows, title: str) -> RenderableType:
    """The rows as a table: mark, host, what it waits for (or did), seconds."""
    from rich.table import Table
    from rich.text import Text

    table = Table.grid(padding=(0, 1))
    table.add_column(no_wrap=True)
    table.add_column(no_wrap=True, style="bold")
    table.add_column(no_wrap=True, overflow="ellipsis", ratio=1)
    table.add_column(no_wrap=True, justify="right")
    table.add_row("", Text(title, style="bold"), "",
                  Text(f"{rows.clock() - rows.started:.1f} s", style="dim"))
    for key, text, seconds, state in rows.snapshot():
        mark, colour = MARKS[state]
        table.add_row(Text(mark, style=colour), key, Text(text, style="" if state == "wait"
                                                          else "dim"),
                      Text(f"{seconds:.1f} s", style="cyan" if state == "wait" else "dim"))
    return table


class Steps:
    """What `up`, `setup`, `sync` and `down` wait for, row by row, from their events and hooks.

    `steps` are those the command takes, in order, among `sync`, `setup`, `gpus` (the busy-GPU
    check) and `launch`; each begins when the one before it ends (`step_ended`).
    """

    def __init__(self, rows: Rows, hosts: Sequence[str], steps: Sequence[str],
                 task_hosts: Mapping[str, str] | None = None,
                 launch_hosts: Sequence[str] | None = None) -> None:
        self.rows = rows
        self.hosts = tuple(hosts)
        self.steps = tuple(steps)
        self.task_hosts = dict(task_hosts or {})
        self.launch_hosts = tuple(launch_hosts if launch_hosts is not None else hosts)
        self.step: str | None = None
        if self.steps:
            self._begin(self.steps[0])

    def _begin(self, step: str) -> None:
        self.step = step
        hosts = self.launch_hosts if step in ("gpus", "launch") else self.hosts
        for host in hosts:
            self.rows.begin(host, _STEP_TEXT.get(step, step))

    def step_ended(self, step: str, failed: Iterable[str] = ()) -> None:
        """`step` ended on every host (`failed`: those where it failed); the next begins."""
        for host in failed:
            self.rows.end(host, f"{step} failed", failed=True)
        self.rows.end_all()
        if step in self.steps and step == self.step:
            later = self.steps[self.steps.index(step) + 1:]
            if later and not failed:
                self._begin(later[0])

    def run_started(self, run_id: str) -> None:
        """A run id was chosen: the busy-GPU check passed; the run's folders are prepared."""
        self.rows.end_all()
        self.step = "launch"
        for host in self.launch_hosts:
            self.rows.begin(host, f"preparing run {run_id}")

    def host_event(self, step: str, host: str, text: str) -> None:
        """One host's line of `step` (`sync`'s and `setup`'s progress)."""
        if step == "sync":
            if text.startswith("rsync missing"):
                self.rows.note(host, f"sync: {text}")
            else:
                self.rows.end(host, f"sync: {text}")
        elif text.endswith("skipped"):
            self.rows.end(host, f"setup: {text}")
        elif " exited " in text:
            self.rows.end(host, f"setup {text}", failed=True)
        else:
            self.rows.begin(host, f"setup {text}")

    def event(self, text: str) -> None:
        """A controller event line (`on_event`); lines about no host change no row."""
        found = _HOST_EVENT.match(text)
        if found:
            self.host_event(found.group(1), found.group(2), found.group(3))
        elif text.startswith("starting "):
            self._starting([n.strip() for n in text[len("starting "):].split(",")])
        elif (stopping := _STOPPING.match(text)) is not None:
            run_id, hosts, how = stopping.groups()
            for host in hosts.split(", "):
                self.rows.begin(host, f"stopping run {run_id}: {how}")

    def _starting(self, names: Sequence[str]) -> None:
        by_host: dict[str, list[str]] = {}
        for name in names:
            by_host.setdefault(self.task_hosts.get(name, "?"), []).append(name)
        for host in self.launch_hosts:
            if not self.rows.waiting(host) or host in by_host:
                continue
            if self.rows.text(host).startswith("preparing"):  # --ps-first: not its turn yet
                self.rows.begin(host, "waiting for the parameter servers to listen")
            else:  # an earlier phase's tasks (the ps) listen by now
                self.rows.end(host, "listening")
        for host, mine in by_host.items():
            self.rows.begin(host, f"starting {', '.join(mine)} (until "
                                  f"{'it listens' if len(mine) == 1 else 'they listen'})")


class LiveView:
    """The rows drawn below the scrolling lines until the `with` block ends (then erased)."""

    def __init__(self, rows: Rows, title: str, console: Console) -> None:
        self.rows = rows
        self.title = title
        self.console = console
        self._live: object | None = None

    def __enter__(self) -> LiveView:
        from rich.live import Live

        live = Live(console=self.console, transient=True, refresh_per_second=8,
                    redirect_stdout=False, redirect_stderr=False,
                    get_renderable=lambda: render(self.rows, self.title))
        live.start(refresh=True)
        self._live = live
        return self

    def __exit__(self, *exc: object) -> None:
        live, self._live = self._live, None
        if live is not None:
            live.stop()  # type: ignore[attr-defined]

    def print_above(self, line: str, err: bool = False) -> None:
        """One plain-mode line, printed above the rows (ANSI colours kept or dropped as the
        console's colour system says)."""
        from rich.text import Text

        self.console.print(Text.from_ansi(line), soft_wrap=True)
