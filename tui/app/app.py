"""`TfctlApp`: the whole cluster and job on one Textual screen.

The app takes its sources by injection (a run controller, a telemetry source, optional owners,
findings and tunnel: `sources.Sources`), so tests drive it with fakes and `tfctl ui` with the real
lab; build it with `tfctl.tui.app.factory.make_app`. All blocking work runs in thread workers
(`workers.py`, given what they need, never the app) that post past-tense messages; handlers here
update the `Board` and the widgets on the UI thread. Each host is polled by its own worker and
the next poll is scheduled only when the last one finished, so a dead host delays nobody and
polls never pile up. Telemetry is read non-blocking once per GPU refresh; widgets repaint only
what changed. The keys are the app's actions (`BINDINGS`): those that act on the cluster (up,
down, sync, restart, tunnel, shell, quit) and those that change the view.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import ClassVar

from rich.markup import escape
from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Container
from textual.events import Resize
from textual.widgets import Footer

from tfctl.remote.errors import RemoteError
from tfctl.remote.gpus.lastseen import HostTelemetry
from tfctl.remote.reach import clock_hms
from tfctl.remote.runs.status import TaskStatus
from tfctl.tui.app import messages as msg
from tfctl.tui.app.dialogs import ConfirmScreen, HelpScreen
from tfctl.tui.app.history import open_in_browser
from tfctl.tui.app.model import cells
from tfctl.tui.app.model.board import Board
from tfctl.tui.app.model.hostlines import build_host_lines, not_answering
from tfctl.tui.app.model.logbuffer import LogBuffer, LogView
from tfctl.tui.app.sources import FindingLike, OwnerOf, Sources, Timing
from tfctl.tui.app.widgets.cluster import ClusterView
from tfctl.tui.app.widgets.header import (
    HeaderFacts,
    builtin_findings,
    header_text,
    merge_findings,
    no_findings_text,
)
from tfctl.tui.app.widgets.logs import LogPane
from tfctl.tui.app.widgets.panels import FindingsPanel, HeaderBar, ViewTabs
from tfctl.tui.app.widgets.tasks import TasksTable
from tfctl.tui.app.workers import ThreadPerCall, Work, Workers

NARROW_BELOW = (120, 34)  # (columns, rows): below either, the compact layout
VIEWS = ("tasks", "logs", "findings")
WIDE_FINDING_LINES = 6  # the panel's max-height (8) less its border


class TfctlApp(App[None]):
    CSS_PATH = str(Path(__file__).with_name("app.tcss"))
    TITLE = "tfctl"
    ENABLE_COMMAND_PALETTE = False  # its footer entry would push our keys off an 80-column line
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("u", "up", "up"),
        Binding("d", "down", "down"),
        Binding("s", "sync", "sync"),
        Binding("r", "restart", "restart"),
        Binding("t", "tunnel", "tunnel"),
        Binding("x", "shell", "shell", show=False),
        Binding("h", "history", "runs", show=False),
        Binding("L", "lab", "lab", show=False),
        Binding("l", "view('logs')", "logs"),
        Binding("g", "view('tasks')", "gpus"),
        Binding("F", "view('findings')", "findings", show=False),
        Binding("a", "all_logs", "all logs", show=False),
        Binding("slash", "filter", "filter", show=False),
        Binding("f", "follow", "follow", show=False),
        Binding("question_mark", "help", "help"),
        Binding("q", "leave", "quit"),
    ]

    def __init__(self, sources: Sources, timing: Timing | None = None) -> None:
        super().__init__()
        timing = timing or Timing()
        controller = sources.controller
        self.inventory = inventory = controller.inventory
        self.controller = controller
        self.telemetry = sources.telemetry
        self.owners = sources.owners
        self.tunnel = sources.tunnel
        self.reporter, self.opener = sources.reporter, sources.opener or open_in_browser
        self.shell = sources.shell  # `x`: `tfctl ssh TARGET`'s session on this terminal
        self.gpu_refresh_s = timing.gpu_refresh_s
        self.clock = timing.clock
        self.monotonic = timing.monotonic
        self.board = Board(controller.plan)
        self.logs = LogBuffer(prefix_width=max((len(t.name) for t in controller.plan.tasks),
                                               default=0))
        self.log_view = LogView()
        self.view = "tasks"
        self.narrow = False
        self.focus_host: str | None = None
        self.injected_findings: Sequence[FindingLike] = ()
        self.findings: Sequence[FindingLike] = ()  # injected ones and the app's own
        self.tunnel_url: str | None = None
        self.busy: str | None = None  # the action running ("up", "down", …), in the header
        self.busy_said = ""
        self.telemetry_bad_since: dict[str, float] = {}
        self.workers_ = Workers(self, controller, self.board, clock=timing.clock,
                                task_refresh_s=timing.task_refresh_s,
                                log_refresh_s=timing.log_refresh_s, findings=sources.findings,
                                tunnel=sources.tunnel)
        # Held, not queried: updates from timers then never race the widgets' removal at exit.
        self.header_bar = HeaderBar(id="header")
        self.cluster_view = ClusterView(id="cluster")
        self.view_tabs = ViewTabs(id="tabs")
        self.tasks_table = TasksTable(id="tasks")
        self.findings_panel = FindingsPanel(id="findings")
        self.log_pane = LogPane(id="logs")
        self._tasks_dirty = False
        self._draw_soon = False
        self._pending_log_lines: list[str] = []
        self._restart_max = {t: inventory.job.restart.max for t in
                             ("ps", "worker", "chief", "evaluator", "tensorboard")
                             if inventory.job.restart.for_type(t) != "never"}

    # -- layout ---------------------------------------------------------------------------------
    def compose(self) -> ComposeResult:
        yield self.header_bar
        with Container(id="body"):
            with Container(id="top"):
                yield self.cluster_view
                yield self.view_tabs
                yield self.tasks_table
            yield self.findings_panel
            yield self.log_pane
        yield Footer()

    def on_mount(self) -> None:
        asyncio.get_running_loop().set_default_executor(ThreadPerCall())
        self.cluster_view.border_title = "Hosts"
        self.tasks_table.border_title = "Tasks"
        self._set_log_title()
        self._apply_layout(self.size.width, self.size.height)
        self.screen.add_class("-view-tasks")
        if self.telemetry is not None:
            self.telemetry.start()
        self.refresh_tasks()
        self.tick()
        self.set_interval(self.gpu_refresh_s, self.tick, name="gpu refresh")
        self.workers_.find_run()
        self.workers_.poll_findings()
        self.tasks_table.focus()

    def on_unmount(self) -> None:
        if self.telemetry is not None:
            self.telemetry.stop()
        if self.tunnel is not None and self.tunnel_url is not None:
            self.tunnel.close()
        # The controller belongs to whoever made it (`tfctl ui`, `tfctl demo`): not closed here.

    def on_resize(self, event: Resize) -> None:
        self._apply_layout(event.size.width, event.size.height)

    def _apply_layout(self, width: int, height: int) -> None:
        narrow = width < NARROW_BELOW[0] or height < NARROW_BELOW[1]
        self.narrow = narrow
        self.screen.set_class(narrow, "-narrow")
        self.cluster_view.compact = narrow
        self._show_tabs()

    def _show_tabs(self) -> None:
        self.view_tabs.show(self.view, len(self.findings), self.log_view.task, self.focus_host)

    # -- the refresh tick: one frame per GPU refresh (UI thread; telemetry never blocks) ---------
    def tick(self) -> None:
        """Draw everything that changed since the last tick, in one frame.

        Why one frame: task polls, log polls and telemetry arrive at different moments; drawing
        each as it comes costs a compositor pass each (3.5 frames/s at 16 hosts, measured).
        Gathered here they cost one, and nothing waits longer than a GPU refresh."""
        now = self.clock()
        snapshots = None
        if self.telemetry is not None:
            snapshots = {h.name: self.telemetry.snapshot(h.name) for h in self.inventory.hosts}
        owner_of = self.owners or self._owner_from_processes(snapshots or {})
        quiet = {h.name: words for h in self.inventory.hosts if (words := not_answering(
            self.board.links.get(h.name), (snapshots or {}).get(h.name), now,
            self.monotonic())) is not None}
        self.findings = merge_findings(self.injected_findings,
                                       builtin_findings(self.board, quiet))
        all_of_them = self.narrow or self.view == "findings"
        self.findings_panel.show(self.findings, None if all_of_them else WIDE_FINDING_LINES,
                                 no_findings_text(self.board, quiet))
        if self._tasks_dirty:
            self.refresh_tasks()
        if self._pending_log_lines:
            self.log_pane.append(self._pending_log_lines)
            self._pending_log_lines = []
        lines = build_host_lines(
            self.inventory.hosts, self.board.links, snapshots,
            self.telemetry.history if self.telemetry is not None else None,
            owner_of, self.findings, self.telemetry_bad_since, now, self.monotonic())
        self.cluster_view.show(lines)
        facts = HeaderFacts(self.inventory.name, self.gpu_refresh_s, self.tunnel_url, self.busy,
                            self.busy_said)
        self.header_bar.show(header_text(facts, self.board, lines, now))
        self._show_tabs()

    def _owner_from_processes(self, snapshots: Mapping[str, HostTelemetry]) -> OwnerOf:
        """Owners from the GPU processes and our tasks' pids, until `tfctl.remote.gpus.owners`
        (process groups from the run manifests) is injected as `owners`."""
        pids: dict[str, dict[int, str]] = {}

        def owner_of(host: str, uuid: str) -> str:
            tel = snapshots.get(host)
            if tel is None:
                return "?"
            if host not in pids:
                pids[host] = self.board.pid_tasks(host)
            return cells.owner_label(tel, uuid, pids[host], known=self.board.tasks_known(host))

        return owner_of

    def refresh_tasks(self) -> None:
        self._tasks_dirty = False
        flagged = {task: f.level for f in self.findings
                   if (task := f.task) is not None}
        rows = self.board.task_rows(self.clock(), self.focus_host, self._restart_max, flagged)
        self.tasks_table.show(rows)

    def refresh_all(self) -> None:
        """Draw now rather than at the next tick (first data of a run, a user's action)."""
        self._tasks_dirty = True
        self.tick()

    def tasks_changed(self, now: bool = False) -> None:
        """The next tick redraws the tasks; `now` draws at once (coalesced with other messages
        already queued, as when several hosts answer together)."""
        self._tasks_dirty = True
        if now and not self._draw_soon:
            self._draw_soon = True
            self.call_later(self._draw_now)

    def _draw_now(self) -> None:
        self._draw_soon = False
        self.refresh_all()

    # -- messages from workers ------------------------------------------------------------------
    def on_run_found(self, message: msg.RunFound) -> None:
        if self.board.set_run(message.run):
            self.workers_.forget_logs()
            self.tasks_changed(now=True)
            if message.run is not None:
                self._add_log_lines([("tfctl", f"── run {message.run.run_id} ──")])
        for host in self.board.run_hosts:
            self.workers_.poll_host(host)
        self.workers_.poll_logs()

    def on_host_polled(self, message: msg.HostPolled) -> None:
        news = self._is_news(message.host, None)
        self.board.host_polled(message.host, message.tasks, message.at_s)
        self._after_poll(message.host, news)

    def on_host_poll_failed(self, message: msg.HostPollFailed) -> None:
        news = self._is_news(message.host, message.error_type)
        self.board.host_failed(message.host, message.what, message.error_type, message.at_s)
        self._after_poll(message.host, news)

    def _is_news(self, host: str, error_type: type[Exception] | None) -> bool:
        """A host's first answer, or a change between reachable and not: drawn at once."""
        link = self.board.link(host)
        first = link.polled_at_s is None and link.error is None
        return first or link.error_type is not error_type

    def _after_poll(self, host: str, news: bool) -> None:
        self.workers_.poll_done(host)
        self.tasks_changed(now=news)
        if self.board.should_finalize():
            self.board.finalize_requested = self.board.run_id
            self.workers_.read_run_status()

    def on_run_status_read(self, message: msg.RunStatusRead) -> None:
        if message.status is None:
            return
        self.board.status_read(message.status, message.at_s)
        self.tasks_changed(now=True)
        if self.board.finished_exit_code is not None:
            self.notify(f"Run {message.status.run_id} has ended with exit status "
                        f"{self.board.finished_exit_code}.", title="Job ended")

    def on_log_lines_arrived(self, message: msg.LogLinesArrived) -> None:
        self.workers_.logs_done()
        if message.run_id != self.board.run_id:
            return
        if "" in message.errors:
            self.notify(message.errors[""], title="Reading the logs failed", severity="error")
        self._add_log_lines(message.lines)

    def _add_log_lines(self, lines: list[tuple[str, str]]) -> None:
        if not lines:
            return
        kept = self.logs.add(lines)  # the start-up notices folded
        self.board.log_lines(lines)
        self._pending_log_lines += self.logs.render(self.log_view, kept)

    def on_findings_read(self, message: msg.FindingsRead) -> None:
        self.workers_.findings_done()
        self.injected_findings = tuple(message.findings)  # drawn at the next tick

    def on_action_progressed(self, message: msg.ActionProgressed) -> None:
        self.busy_said = message.text
        self._add_log_lines([("tfctl", message.text)])

    def on_action_succeeded(self, message: msg.ActionSucceeded) -> None:
        self.busy, self.busy_said = None, ""
        if message.action == "tunnel":
            self.tunnel_url = message.result if isinstance(message.result, str) else None
        if message.action in ("up", "down", "restart"):
            self.workers_.find_run(refresh=message.action != "up")
            for host in self.board.run_hosts:
                self.workers_.poll_host(host)
        self.notify(message.text, title=message.title)

    def on_action_failed(self, message: msg.ActionFailed) -> None:
        self.busy, self.busy_said = None, ""
        self.notify(message.cause, title=message.title, severity="error", timeout=15)

    def on_cluster_view_host_focused(self, message: ClusterView.HostFocused) -> None:
        self.focus_host = message.host
        self.tasks_table.border_title = (
            f"Tasks · {message.host}" if message.host else "Tasks")
        self.refresh_tasks()
        self._show_tabs()

    def on_tasks_table_task_chosen(self, message: TasksTable.TaskChosen) -> None:
        self._set_log_view(LogView(message.task, self.log_view.filter))
        if self.narrow:
            self.action_view("logs")

    def on_log_pane_filter_changed(self, message: LogPane.FilterChanged) -> None:
        self._set_log_view(LogView(self.log_view.task, message.text))

    def _set_log_view(self, view: LogView) -> None:
        if view == self.log_view:
            return
        self.log_view = view
        self._pending_log_lines = []  # they are in the buffer, which is redrawn whole
        self.log_pane.replace(self.logs.render(view))
        self._set_log_title()
        self._show_tabs()

    def _set_log_title(self) -> None:
        pane = self.log_pane
        pane.border_title = self.log_view.title()
        pane.border_subtitle = "/ filter · f follow · a all tasks"

    # -- keys that act on the cluster ----------------------------------------------------------
    # Each action that touches hosts runs through `act` (a thread worker, one at a time); the
    # destructive ones, quitting mid-action, and launching onto GPUs other processes hold ask
    # first (`_confirm`).
    def act(self, action: str, title: str, work: Work) -> None:
        """Run an action in a worker unless another one is still running."""
        if self.busy is not None:
            self.notify(f"“{self.busy}” is still running; try again when it has finished.",
                        title="Busy", severity="warning")
            return
        self.busy = action
        self.tick()  # the header says what is running, at once
        self.workers_.act(action, title, work)

    def action_history(self) -> None:
        """The runs the hosts remember; Enter writes and opens one's report."""
        from tfctl.tui.app.history import RunsScreen

        self.push_screen(RunsScreen(self.controller.runs, self.reporter, self.opener))

    def action_lab(self) -> None:
        """Every GPU of every host: free, reserved, or held and by whom (`tfctl lab`)."""
        from tfctl.tui.app.labview import LabScreen

        self.push_screen(LabScreen(self.controller.lab))

    def action_up(self) -> None:
        self.act("up", "Up", self.workers_.do_up)

    def on_gpus_found_busy(self, message: msg.GpusFoundBusy) -> None:
        """`up` refused busy GPUs, as `tfctl up` does: name the holders, offer to force."""
        self.busy, self.busy_said = None, ""
        self.tick()  # the header stops saying "up…" while the question is open
        holders = "\n".join(f"  {escape(line)}" for line in message.holders)
        self._confirm(
            f"GPUs the plan assigns are in use by other processes:\n{holders}\n"
            f"Free GPUs instead: {escape(message.free or 'none')}\n"
            "Nothing was started. Launch anyway?", "Launch anyway",
            lambda: self.act("up", "Up", lambda: self.workers_.do_up(force=True)),
            otherwise=lambda: self.notify(
                "Nothing was started: GPUs the plan assigns are in use (select free GPUs with "
                "`gpus: [...]` in the inventory).", title="Up", severity="warning"))

    def action_down(self) -> None:
        run_id = self.board.run_id
        if run_id is None:
            self.notify("There is no run to stop.", title="Down", severity="warning")
            return
        hosts = ", ".join(self.board.run_hosts)
        self._confirm(f"Stop run {run_id} on {hosts}?\nEvery process it started gets SIGTERM, "
                      "then SIGKILL after 10 s.", "Stop the run",
                      lambda: self.act("down", "Down", self.workers_.do_down))

    def action_sync(self) -> None:
        self.act("sync", "Sync", self.workers_.do_sync)

    def action_restart(self) -> None:
        """`r`: a lost task under the cursor, or from the Hosts panel every lost task of the
        host under its cursor, starts again in the run (as `tfctl restart`); any other selected
        task is stopped and started again."""
        task = self.tasks_table.selected_task
        on_host = self._hosts_cursor()
        lost = self._lost_tasks(on_host, None if on_host else task)
        if lost and self.board.run_id is not None:
            self._offer_restart_lost(on_host or lost[0].name, lost)
            return
        if task is None or self.board.run_id is None:
            self.notify("Select a task of a running job first.", title="Restart",
                        severity="warning")
            return
        self._confirm(f"Restart {task}?\nIts processes are stopped and started again with "
                      "the same mask, environment and command.", f"Restart {task}",
                      lambda: self.act("restart", f"Restart {task}",
                                       lambda: self.workers_.do_restart(task)))

    def _hosts_cursor(self) -> str | None:
        """The host under the Hosts panel's cursor when that panel has the focus."""
        hosts = self.cluster_view.hosts
        if self.focused is self.cluster_view and hosts:
            return hosts[min(self.cluster_view.cursor, len(hosts) - 1)].name
        return None

    def _lost_tasks(self, host: str | None, task: str | None) -> list[TaskStatus]:
        """The lost tasks of `host`, or `task` if it is lost, as last read."""
        return [t for h in self.board.run_hosts for t in self.board.link(h).tasks
                if t.state == "lost" and (t.host == host or t.name == task)]

    def _offer_restart_lost(self, target: str, lost: list[TaskStatus]) -> None:
        names = ", ".join(t.name for t in lost)
        at = next((t.host_restarted_at_s for t in lost if t.host_restarted_at_s), None)
        why = (f"{lost[0].host} restarted at {clock_hms(at)}" if at is not None
               else "it and its keeper are gone")
        self._confirm(f"Start {names} again?\nLost ({why}): started again in run "
                      f"{self.board.run_id} with the same command, environment, mask and port, "
                      "from its last checkpoint where the trainer restores one.",
                      f"Start {target} again",
                      lambda: self.act("restart", f"Restart {target}",
                                       lambda: self.workers_.do_restart_lost(target)))

    def action_tunnel(self) -> None:
        if self.tunnel is None:
            self.notify("The TensorBoard tunnel is not available in this build or for this "
                        "inventory (no `job.tensorboard`).", title="Tunnel not available",
                        severity="warning")
            return
        open_it = self.tunnel_url is None
        self.act("tunnel", "TensorBoard tunnel", lambda: self.workers_.do_tunnel(open_it))

    def action_shell(self) -> None:
        """`x`: a shell on the selected host (the Hosts panel has the focus) or in the
        selected task's folder and environment, the app suspended until it ends."""
        from textual.app import SuspendNotSupported

        target = self.shell_target()
        if self.shell is None or target is None:
            self.notify("No shell here: select a host or a task first.", title="Shell",
                        severity="warning")
            return
        code: int | None = None
        failed: Exception | None = None
        try:
            with self.suspend():
                # Caught in here: textual's `suspend` resumes the app only when its block ends
                # without an exception.
                try:
                    code = self.shell(target)
                except Exception as exc:  # the project's errors (unreachable, key refused)
                    failed = exc
        except SuspendNotSupported:
            self.notify(f"This terminal cannot hand over to a shell; run `tfctl ssh {target}`.",
                        title="Shell", severity="warning")
            return
        if failed is not None:
            said = failed.full() if isinstance(failed, RemoteError) else str(failed)
            self.notify(escape(said),
                        title=f"Shell on {target}", severity="error")
            return
        self.notify(f"The shell on {target} ended (exit {code}).", title="Shell")

    def shell_target(self) -> str | None:
        """The host under the Hosts panel's cursor when it has the focus, else the selected
        task (else the focused host)."""
        hosts = self.cluster_view.hosts
        if self.focused is self.cluster_view and hosts:
            return hosts[min(self.cluster_view.cursor, len(hosts) - 1)].name
        return self.tasks_table.selected_task or self.cluster_view.focused_host

    def action_leave(self) -> None:
        """Quit; the job keeps running. Mid-action, ask first: the action would stop half done."""
        if self.busy is None:
            self.exit()
            return
        self._confirm(f"“{self.busy}” is still running.\nQuitting now stops it half done "
                      "(the job's processes keep running; `tfctl status` shows them).",
                      "Quit anyway", self.exit)

    def action_help(self) -> None:
        self.push_screen(HelpScreen())

    def _confirm(self, question: str, yes: str, then: Callable[[], None],
                 otherwise: Callable[[], None] | None = None) -> None:
        def answered(confirmed: bool | None) -> None:
            if confirmed:
                then()
            elif otherwise is not None:
                otherwise()

        self.push_screen(ConfirmScreen(question, yes), answered)

    # -- views ---------------------------------------------------------------------------------
    def action_view(self, view: str) -> None:
        if view not in VIEWS:
            return
        self.view = view
        for name in VIEWS:
            self.screen.set_class(name == view, f"-view-{name}")
        self.tick()
        if view == "logs":
            self.log_pane.log_widget.focus()
        elif view == "tasks":
            self.tasks_table.focus()

    def action_all_logs(self) -> None:
        self._set_log_view(LogView(None, self.log_view.filter))

    def action_filter(self) -> None:
        if self.narrow or self.view != "tasks":
            self.action_view("logs")
        self.log_pane.open_filter()

    def action_follow(self) -> None:
        following = self.log_pane.toggle_follow()
        self.notify("Following new lines." if following else "Paused: new lines are kept but "
                    "the view stays put (f to follow again).", title="Logs")
