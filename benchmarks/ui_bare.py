"""The dashboard's fair peer: a bare Textual app showing the same screen from the same sources.

What `ui_cpu.py --versus-bare` measures the dashboard against. It is what a person would write
with Textual's stock widgets and nothing of tfctl's drawing code: a `DataTable` of hosts and
their GPUs (a line per host, a line per GPU with the same columns: index, name, utilization bar
and percent, memory bar and GiB, temperature, power, a utilization sparkline, owner), a
`DataTable` of tasks (task, host, GPU, state, uptime, restarts, steps/s, last line), a `Log` of
the workers' lines, a header and findings line, the same footer, laid out as the dashboard's
wide layout (hosts beside a 78-column tasks pane, findings and logs below). The text of the
cells comes from the same pure formatters (`tfctl.tui.app.model.cells`), so both show the same
characters in the same colours.

It reads the same synthetic sources as the dashboard in `ui_cpu.py` at the same rates: every
GPU each second on the UI thread (telemetry never blocks), every host's tasks every 2 s and the
logs every second on a background thread, drawn once per second. Being honest in both
directions: only the cells whose text changed are updated (`update_cell`, never
`update_width=True`), the log gets its new lines in one batch per tick, the one-line header is
updated without a layout; and it keeps no model beyond the last values shown, finds nothing,
folds no log notices, and has no host or task cursor logic.
"""

from __future__ import annotations

import re
import threading
import time
from collections import deque
from typing import Any, ClassVar

from rich.text import Text
from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Container
from textual.widgets import DataTable, Footer, Log, Static

from tfctl.tui.app.model import cells

RATE = re.compile(r"steps_per_sec=([0-9.]+)")
SPARK_LEN = 16
LOG_MAX_LINES = 10_000

CSS = """
#header { height: 1; background: $panel; padding: 0 1; }
#body { height: 1fr; }
#top { layout: horizontal; height: 3fr; }
#hosts { width: 1fr; height: 1fr; border: round $primary 60%; overflow-x: hidden; }
#tasks { width: 78; height: 1fr; border: round $primary 60%; overflow-x: hidden; }
#findings { height: 3; border: round $warning 60%; padding: 0 1; }
#logs { height: 2fr; border: round $primary 60%; }
"""

GPU_COLUMNS = (("", 3), ("name", 12), ("util", 10), ("%", 5), ("mem", 5), ("GiB", 11),
               ("temp", 5), ("power", 5), ("history", 6), ("owner", 14))
"""(title, width): each cell's text starts with a space (no cell padding), so that the columns
the dashboard shows fit its 80 columns."""
TASK_COLUMNS = (("task", 13), ("host", 8), ("GPU", 3), ("state / exit", 12), ("up", 7),
                ("rst", 3), ("steps/s", 7), ("last line", 30))


def _util_style(util: float | None) -> str:
    if util is None:
        return "dim"
    return "green" if util >= 50 else ("yellow" if util >= 10 else "dim")


class Gathered:
    """What the background thread read last: each host's tasks (with when), new log lines."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.tasks: dict[str, tuple[float, tuple[Any, ...]]] = {}
        self.lines: list[tuple[str, str]] = []
        self.tasks_new = False


class BareDashboard(App[None]):
    CSS = CSS
    ENABLE_COMMAND_PALETTE = False
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding(key, f"nothing('{label}')", label) for key, label in (
            ("u", "up"), ("d", "down"), ("s", "sync"), ("r", "restart"), ("t", "tunnel"),
            ("l", "logs"), ("g", "gpus"), ("question_mark", "help"), ("q", "quit"))
    ]

    def __init__(self, controller: Any, telemetry: Any, *, gpu_refresh_s: float = 1.0,
                 task_refresh_s: float = 2.0, log_refresh_s: float = 1.0) -> None:
        super().__init__()
        self.controller = controller
        self.telemetry = telemetry
        self.inventory = controller.inventory
        self.gpu_refresh_s, self.task_refresh_s = gpu_refresh_s, task_refresh_s
        self.log_refresh_s = log_refresh_s
        self.gathered = Gathered()
        self.stop = threading.Event()
        self.shown: dict[tuple[str, str], object] = {}  # (row, column) → what the cell shows
        self.spark: dict[str, deque[float | None]] = {}
        self.sampled: dict[str, float | None] = {}  # GPU → the sample its sparkline last took
        self.prefix = max(len(t.name) for t in controller.plan.tasks)
        self.started = time.time()

    def compose(self) -> ComposeResult:
        yield Static(id="header")
        with Container(id="body"):
            with Container(id="top"):
                yield DataTable(id="hosts", show_header=False, cursor_type="none",
                                cell_padding=0)
                yield DataTable(id="tasks", cursor_type="row")
            yield Static(Text("no findings: every host answers", "dim"), id="findings")
            yield Log(id="logs", max_lines=LOG_MAX_LINES, auto_scroll=True)
        yield Footer()

    def on_mount(self) -> None:
        hosts = self.query_one("#hosts", DataTable)
        for title, width in GPU_COLUMNS:
            hosts.add_column(title, width=width, key=title or "index")
        for host in self.inventory.hosts:
            hosts.add_row(*self._host_cells(host, "waiting for telemetry"), key=host.name)
            for i in range(len(host.gpus)):
                hosts.add_row(*[""] * len(GPU_COLUMNS), key=f"{host.name}/{i}")
        tasks = self.query_one("#tasks", DataTable)
        for title, width in TASK_COLUMNS:
            tasks.add_column(title, width=width, key=title)
        for task in self.controller.plan.tasks:
            tasks.add_row(task.name, task.host, task.cuda_visible_devices or cells.DASH,
                          "waiting", cells.DASH, "0", cells.DASH, "", key=task.name)
        self.query_one("#hosts").border_title = "Hosts"
        self.query_one("#tasks").border_title = "Tasks"
        self.query_one("#logs").border_title = "Logs · all tasks"
        self.query_one("#findings").border_title = "Findings"
        threading.Thread(target=self._poll_tasks, daemon=True).start()
        threading.Thread(target=self._poll_logs, daemon=True).start()
        self.tick()
        self.set_interval(self.gpu_refresh_s, self.tick)
        tasks.focus()

    def on_unmount(self) -> None:
        self.stop.set()

    # -- the background: blocking reads, as the dashboard's workers do them ----------------------
    def _poll_tasks(self) -> None:
        while not self.stop.is_set():
            for host in self.controller.plan.hosts_used:
                read = self.controller.host_status(host)
                with self.gathered.lock:
                    self.gathered.tasks[host] = (time.time(), read)
                    self.gathered.tasks_new = True
            self.stop.wait(self.task_refresh_s)

    def _poll_logs(self) -> None:
        follower = self.controller.log_follower()
        while not self.stop.is_set():
            batch = follower.poll()
            with self.gathered.lock:
                self.gathered.lines += batch.lines
            self.stop.wait(self.log_refresh_s)

    # -- one frame per second --------------------------------------------------------------------
    def tick(self) -> None:
        now = time.time()
        with self.gathered.lock:
            polled = dict(self.gathered.tasks) if self.gathered.tasks_new else None
            self.gathered.tasks_new = False
            lines, self.gathered.lines = self.gathered.lines, []
        owners = {(host, t.pid): t.name for host, (_, read) in self.gathered.tasks.items()
                  for t in read}
        hosts = self.query_one("#hosts", DataTable)
        for host in self.inventory.hosts:
            tel = self.telemetry.snapshot(host.name)
            self._set(hosts, host.name, self._host_cells(host, "ok"))
            for gpu in tel.gpus:
                self._set(hosts, f"{host.name}/{gpu.index}", self._gpu_cells(host.name, gpu,
                                                                             tel, owners))
        if polled is not None:
            tasks = self.query_one("#tasks", DataTable)
            for at, read in polled.values():
                for t in read:
                    self._set(tasks, t.name, self._task_cells(t, now - at))
        if lines:
            self.query_one("#logs", Log).write_lines(
                [f"{task:<{self.prefix}} │ {line}" for task, line in lines])
        gpus = sum(len(h.gpus) for h in self.inventory.hosts)
        header = (f"tfctl  {self.inventory.name} · run bench · running "
                  f"{cells.duration(now - self.started)} · {len(self.inventory.hosts)} hosts "
                  f"{gpus} GPUs ⟳{self.gpu_refresh_s:g}s")
        if self.shown.get(("header", "")) != header:
            self.shown["header", ""] = header
            self.query_one("#header", Static).update(header, layout=False)  # height: 1

    def _set(self, table: DataTable[Any], row: str, values: tuple[object, ...]) -> None:
        """Update the cells whose value changed, and only those."""
        for (title, _), value in zip(self._columns(table), values, strict=True):
            if self.shown.get((row, title)) != value:
                self.shown[row, title] = value
                table.update_cell(row, title or "index", value)

    @staticmethod
    def _columns(table: DataTable[Any]) -> tuple[tuple[str, int], ...]:
        return GPU_COLUMNS if table.id == "hosts" else TASK_COLUMNS

    def _host_cells(self, host: Any, state: str) -> tuple[object, ...]:
        return ("", Text(f" {host.name}", "bold"), Text(f" {host.address}", "dim"), "", "",
                Text(f" {len(host.gpus)} GPUs", "dim"), Text(f" {state}", "green"), "", "", "")

    def _gpu_cells(self, host: str, gpu: Any, tel: Any,
                   owners: dict[tuple[str, int], str]) -> tuple[object, ...]:
        util = gpu.utilization_gpu_pct
        history = self.spark.setdefault(gpu.uuid, deque(maxlen=SPARK_LEN))
        if self.sampled.get(gpu.uuid) != tel.last_sample_at:
            self.sampled[gpu.uuid] = tel.last_sample_at
            history.append(util)
        pids = [p.pid for p in tel.processes if p.gpu_uuid == gpu.uuid]
        owner = ",".join(owners.get((host, pid), f"pid {pid}") for pid in pids) or "idle"
        fraction = cells.mem_fraction(gpu.memory_used_mib, gpu.memory_total_mib)
        name = cells.ellipsize(gpu.name.removeprefix("NVIDIA GeForce "), 11)
        return (
            f" {gpu.index:>2}", Text(f" {name}", "bold"),
            Text(f" {cells.bar(None if util is None else util / 100, 9)}", _util_style(util)),
            f" {cells.pct(util)}", Text(f" {cells.bar(fraction, 4)}", "blue"),
            f" {cells.mem_gib(gpu.memory_used_mib, gpu.memory_total_mib)}",
            f" {cells.temp_c(gpu.temperature_c)}", f" {cells.power_w(gpu.power_draw_w)}",
            Text(f" {cells.sparkline(list(history), 5)}", "cyan"), Text(f" {owner}", "cyan"))

    def _task_cells(self, task: Any, since_poll_s: float) -> tuple[object, ...]:
        rate = RATE.search(task.last_line or "")
        up = None if task.uptime_s is None else task.uptime_s + since_poll_s
        return (task.name, task.host, task.mask or cells.DASH, Text(task.state, "green"),
                cells.duration(up), str(task.restarts), rate.group(1) if rate else cells.DASH,
                Text(task.last_line or "", "dim"))

    def action_nothing(self, key: str) -> None:
        """The footer's keys are there to be drawn; the peer acts on none of them."""
