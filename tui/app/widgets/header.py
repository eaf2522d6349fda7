"""The header line's words, and the findings the app states itself when none are injected. Pure."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from rich.text import Text

from tfctl.inventory.frameworks import framework_of
from tfctl.tui.app.model import cells
from tfctl.tui.app.model.board import DOWN, Board
from tfctl.tui.app.model.hostlines import HostLine
from tfctl.tui.app.sources import AppFinding, FindingLike


@dataclass(frozen=True)
class HeaderFacts:
    cluster: str
    refresh_s: float
    tunnel_url: str | None = None
    busy: str | None = None
    busy_said: str = ""


def header_text(facts: HeaderFacts, board: Board, hosts: Sequence[HostLine],
                now_s: float) -> Text:
    text = Text(no_wrap=True, overflow="ellipsis")
    text.append("tfctl ", "bold")
    text.append(f" {facts.cluster}")
    if board.run_id is None:
        text.append(" · no run", "dim")
        text.append(" (u to start one)", "dim")
    else:  # the run and its job's framework (TensorFlow, PyTorch, JAX), then how it is
        text.append(f" · run {board.run_id} · {framework_of(board.plan.inventory.job).title} · ")
        text.append_text(_run_state(board, now_s))
    gpus = sum(len(h.gpus) or h.gpu_count for h in hosts)
    down = sum(1 for h in hosts if h.level == "down")
    text.append(f" · {len(hosts)} hosts")
    if down:
        text.append(f" ({down} down)", "bold red")
    text.append(f" {gpus} GPUs")
    if facts.tunnel_url:
        text.append(" · TensorBoard ")
        text.append(facts.tunnel_url, "underline cyan")
    if facts.busy:
        text.append(f" · {facts.busy}…", "bold yellow")
        if facts.busy_said:
            text.append(f" {facts.busy_said}", "yellow")
    text.append(f" ⟳{facts.refresh_s:g}s", "dim")
    return text


def _run_state(board: Board, now_s: float) -> Text:
    if board.finished_exit_code is not None:
        code = board.finished_exit_code
        return Text(f"finished, exit {code}", "green" if code == 0 else "bold red")
    tasks = board.tasks()
    if not tasks:
        return Text("waiting for hosts", "yellow")
    if any(t.state in ("running", "starting") for t in tasks):
        return Text(f"running {cells.duration(board.elapsed_s(now_s))}", "green")
    return Text(f"ended, exit {board.exit_code()}", "yellow")


def builtin_findings(board: Board, quiet: Mapping[str, tuple[str, str]] | None = None
                     ) -> list[AppFinding]:
    """What the app knows from its own polls: hosts cut off or not answering, and tasks that
    failed. `quiet` (host → words, level) is `hostlines.not_answering` of each host, what the
    Hosts pane says of it, so the two panes agree."""
    found: list[AppFinding] = []
    for host in board.unreachable_hosts():
        link = board.link(host)
        since = f" since {cells.clock_hms(link.bad_since_s)}" if link.bad_since_s else ""
        found.append(AppFinding("error", f"{host} unreachable{since} ({link.error}): its tasks "
                                      "are unknown and not counted", host))
    for host, (words, level) in (quiet or {}).items():
        if host in board.unreachable_hosts():
            continue  # said above, with the poll's own error
        known = "its tasks are as last read" if board.link(host).tasks else \
            "its tasks are not known yet"
        found.append(AppFinding("error" if level == DOWN else "warning",
                             f"{host} {words}: {known}", host))
    for task in board.tasks():
        if task.failed:
            last = f": {task.last_line}" if task.last_line else ""
            found.append(AppFinding("warning", f"{task.name} on {task.host} "
                                            f"{task.describe()}{last}", task.host,
                                 task=task.name))
    return found


def no_findings_text(board: Board, quiet: Mapping[str, tuple[str, str]]) -> str:
    """The Findings pane's words when it has none: only what is known (a host that has not
    answered a poll yet is not said to answer)."""
    if board.run_id is None:
        return "no findings"
    silent = [h for h in board.run_hosts if board.link(h).polled_at_s is None or h in quiet]
    if silent:
        return f"no findings yet: waiting for an answer from {', '.join(silent)}"
    return "no findings: every host answers"


def merge_findings(injected: Sequence[FindingLike], own: Sequence[AppFinding]
                   ) -> tuple[FindingLike, ...]:
    """The injected findings, then the app's own that say something new: a failed task no
    injected finding names, an unreachable host no injected error is about."""
    extra: list[FindingLike] = []
    for f in own:
        if f.task is not None:
            if any(f.task in i.text or i.task == f.task for i in injected):
                continue
        elif any(i.host == f.host and i.level == f.level for i in injected):
            continue
        extra.append(f)
    return (*injected, *extra)

