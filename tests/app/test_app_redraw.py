"""What the dashboard redraws: a growing log pane repaints itself and not the screen, and the
line views' kept lines follow a change of style (docs/field-notes.md §5, issue 35)."""

from __future__ import annotations

from textual.app import App, ComposeResult
from textual.screen import Screen

from tests.support.pilot import fakes_app, polled, sync, until
from tfctl.tui.app.widgets.cluster import ClusterView
from tfctl.tui.app.widgets.logs import LogPane, TailLog


class LogOnly(App[None]):
    def compose(self) -> ComposeResult:
        yield LogPane(id="logs")


@sync
async def test_a_growing_log_follows_its_end_without_laying_the_screen_out() -> None:
    app = LogOnly()
    async with app.run_test(size=(80, 12)) as pilot:
        pane = app.query_one(LogPane)
        pane.append([f"first lines, {n:03d}" for n in range(40)])  # more than the pane shows
        await pilot.pause(0.1)
        log = app.query_one("#log", TailLog)
        assert log.show_vertical_scrollbar and log.is_vertical_scroll_end
        layouts: list[Screen[object]] = []
        screen = app.screen
        lay_out = screen._refresh_layout

        def counted(*args: object, **kw: object) -> None:
            layouts.append(screen)
            lay_out(*args, **kw)  # type: ignore[arg-type]

        screen._refresh_layout = counted  # type: ignore[method-assign]
        for batch in range(5):
            pane.append([f"batch {batch}, {n:03d}" for n in range(20)])  # none wider
            await pilot.pause(0.05)
        assert layouts == []
        assert log.line_count == 140 and log.is_vertical_scroll_end
        assert log.vertical_scrollbar.window_virtual_size == 140  # the thumb is where it is
        assert log.lines[-1] == "batch 4, 019"


@sync
async def test_the_hosts_lines_are_drawn_again_in_a_new_theme() -> None:
    app, _, _ = fakes_app()
    async with app.run_test(size=(160, 48)) as pilot:
        await until(pilot, lambda: polled(app))
        view = app.query_one(ClusterView)
        before = view.render_line(1)  # a GPU line, kept
        assert view.render_line(1) is before
        app.theme = "textual-light" if app.theme != "textual-light" else "nord"
        await pilot.pause(0.2)
        after = view.render_line(1)
        assert after.text == before.text
        assert {s.style.bgcolor for s in after} != {s.style.bgcolor for s in before}
