"""The keys that act on the cluster: up, down, sync, restart, tunnel, help, quit.

A mixin of `TfctlApp` (kept apart so the app module stays about layout and data flow). Each
action that touches hosts runs through `Workers.act` (a thread worker, one at a time); the
destructive ones, and quitting mid-action, ask first.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, cast

from tfctl.tui.app.dialogs import ConfirmScreen, HelpScreen

if TYPE_CHECKING:
    from tfctl.tui.app.app import TfctlApp


class KeyActions:
    @property
    def tfctl(self) -> TfctlApp:
        """This object as the app it is mixed into (mypy cannot see that on its own)."""
        return cast("TfctlApp", self)

    def action_up(self) -> None:
        app = self.tfctl
        app.workers_.act("up", "Up", app.workers_.do_up)

    def action_down(self) -> None:
        app = self.tfctl
        run_id = app.board.run_id
        if run_id is None:
            app.notify("There is no run to stop.", title="Down", severity="warning")
            return
        hosts = ", ".join(app.board.run_hosts)
        self._confirm(f"Stop run {run_id} on {hosts}?\nEvery process it started gets SIGTERM, "
                      "then SIGKILL after 10 s.", "Stop the run",
                      lambda: app.workers_.act("down", "Down", app.workers_.do_down))

    def action_sync(self) -> None:
        app = self.tfctl
        app.workers_.act("sync", "Sync", app.workers_.do_sync)

    def action_restart(self) -> None:
        app = self.tfctl
        task = app.tasks_table.selected_task
        if task is None or app.board.run_id is None:
            app.notify("Select a task of a running job first.", title="Restart",
                       severity="warning")
            return
        self._confirm(f"Restart {task}?\nIts processes are stopped and started again with "
                      "the same mask, environment and command.", f"Restart {task}",
                      lambda: app.workers_.act("restart", f"Restart {task}",
                                               lambda: app.workers_.do_restart(task)))

    def action_tunnel(self) -> None:
        app = self.tfctl
        if app.tunnel is None:
            app.notify("The TensorBoard tunnel is not available in this build or for this "
                       "inventory (no `job.tensorboard`).", title="Tunnel not available",
                       severity="warning")
            return
        open_it = app.tunnel_url is None
        app.workers_.act("tunnel", "TensorBoard tunnel", lambda: app.workers_.do_tunnel(open_it))

    def action_leave(self) -> None:
        """Quit; the job keeps running. Mid-action, ask first: the action would stop half done."""
        app = self.tfctl
        if app.busy is None:
            app.exit()
            return
        self._confirm(f"“{app.busy}” is still running.\nQuitting now stops it half done "
                      "(the job's processes keep running; `tfctl status` shows them).",
                      "Quit anyway", app.exit)

    def action_help(self) -> None:
        self.tfctl.push_screen(HelpScreen())

    def _confirm(self, question: str, yes: str, then: Callable[[], None]) -> None:
        def answered(confirmed: bool | None) -> None:
            if confirmed:
                then()

        self.tfctl.push_screen(ConfirmScreen(question, yes), answered)
