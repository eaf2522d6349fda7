"""The keys that act on the cluster: up, down, sync, restart, tunnel, shell, help, quit.

`KeyActions` is the base of `TfctlApp` (kept apart so the app module stays about layout and data
flow); it names the few things of the app it uses as annotations, and never imports `app.py`.
Each action that touches hosts runs through `Workers.act` (a thread worker, one at a time); the
destructive ones, quitting mid-action, and launching onto GPUs other processes hold, ask first.
"""

from __future__ import annotations

from collections.abc import Callable

from rich.markup import escape
from textual.app import App

from tfctl.remote.reach import clock_hms
from tfctl.remote.runs.status import TaskStatus
from tfctl.tui.app import messages as msg
from tfctl.tui.app.dialogs import ConfirmScreen, HelpScreen
from tfctl.tui.app.model.board import Board
from tfctl.tui.app.sources import RunControl, Tunnel
from tfctl.tui.app.widgets.cluster import ClusterView
from tfctl.tui.app.widgets.tasks import TasksTable
from tfctl.tui.app.workers import Work, Workers


class KeyActions(App[None]):
    # Set by `TfctlApp.__init__`.
    board: Board
    workers_: Workers
    tasks_table: TasksTable
    tunnel: Tunnel | None
    tunnel_url: str | None
    busy: str | None
    """The action running now ("up", "down", …), shown in the header; None when idle."""
    busy_said: str
    controller: RunControl
    reporter: Callable[[str], str] | None
    opener: Callable[[str], object]
    shell: Callable[[str], int] | None
    """`x`: runs `tfctl ssh TARGET`'s session on this terminal; its exit status."""
    cluster_view: ClusterView

    def tick(self) -> None:
        """Draw what changed since the last tick (`TfctlApp.tick`)."""
        raise NotImplementedError

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
               else "its supervisor is gone")
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
            full = getattr(failed, "full", None)
            self.notify(escape(full() if callable(full) else str(failed)),
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
