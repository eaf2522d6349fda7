"""`tfctl wait --notify URL`: word of the run's end from this client, through apprise.

apprise (https://github.com/caronc/apprise) speaks about a hundred services from one URL
scheme (`ntfys://topic`, `slack://…`, `mailto://…`, `json://host/path` for a plain JSON POST),
so tfctl writes no sender of its own. It is imported here only, when `--notify` is given: no
other command pays for it. The word sent from the hosts with no client connected is
`job.notify` (remote/agent/notify.py); this one needs the client to be waiting when the run ends.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def bad_urls(urls: Sequence[str]) -> list[str]:
    """The URLs apprise cannot read (checked before the wait, not when the run has ended)."""
    import apprise

    return [url for url in urls if not apprise.Apprise().add(url)]


def words(run_id: str | None, exit_code: int | None, fatal: str | None,
          stopped: Sequence[str], timed_out: bool, timeout_s: float | None) -> tuple[str, str]:
    """(title, body) of the word for a `wait` that came back with this."""
    if run_id is None:
        return "tfctl: no run found", "tfctl wait found no current run"
    if timed_out:
        return (f"tfctl run {run_id} still running",
                f"run {run_id} was still running after {timeout_s or 0:g} s of tfctl wait")
    how = "finished" if exit_code == 0 else "failed"
    body = [f"run {run_id} {how} with exit status {exit_code}"]
    if fatal:
        body.append(fatal)
    if stopped:
        body.append(f"stopped {', '.join(stopped)}")
    return f"tfctl run {run_id} {how}", "\n".join(body)


def send(urls: Sequence[str], title: str, body: str, failed: bool) -> list[str]:
    """Send to every URL; the URLs it could not be delivered to."""
    import apprise

    missed = []
    for url in urls:
        one: Any = apprise.Apprise()
        one.add(url)
        kind = apprise.NotifyType.FAILURE if failed else apprise.NotifyType.SUCCESS
        if not one.notify(title=title, body=body, notify_type=kind):
            missed.append(url)
    return missed
