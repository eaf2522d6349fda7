"""Following a run's logs on every host by byte offsets: one round trip per host per poll."""

from __future__ import annotations

from dataclasses import dataclass, field

from tfctl.remote.connect.fleet import Fleet
from tfctl.remote.connect.session import agentops
from tfctl.remote.connect.transport import Transport


@dataclass
class LogBatch:
    lines: list[tuple[str, str]] = field(default_factory=list)
    """(task, line) in arrival order per task."""
    errors: dict[str, str] = field(default_factory=dict)
    hosts: dict[str, str] = field(default_factory=dict)
    """task → the host its log lives on, for every task with lines here."""


class LogFollower:
    """Remembers, per task, how far its log was read, so each poll returns only new lines."""

    def __init__(self, fleet: Fleet, run_id: str, hosts: list[str],
                 tasks: set[str] | None = None, max_bytes: int = 256 * 1024):
        self.fleet = fleet
        self.run_id = run_id
        self.hosts = hosts
        self.tasks = tasks
        self.max_bytes = max_bytes
        self.offsets: dict[str, dict[str, int]] = {h: {} for h in hosts}
        self.partial: dict[str, str] = {}

    def poll(self, tail_lines: int | None = None) -> LogBatch:
        def read(t: Transport) -> dict[str, agentops.LogChunk]:
            return agentops.logs(t, t.host.workdir, self.run_id, self.offsets[t.host.name],
                                 self.max_bytes, tail_lines)

        answers = self.fleet.map(read, self.hosts)
        batch = LogBatch(errors={h: str(e) for h, e in answers.failed.items()})
        for host, answer in answers.succeeded.items():
            for task, chunk in sorted(answer.items()):
                self.offsets[host][task] = chunk.offset
                if self.tasks is not None and task not in self.tasks:
                    continue
                if chunk.reset:
                    self.partial.pop(task, None)
                lines = self._split(task, chunk.data)
                if lines:
                    batch.hosts[task] = host
                batch.lines += [(task, line) for line in lines]
        return batch

    def _split(self, task: str, text: str) -> list[str]:
        return whole_lines(self.partial, task, text)


def whole_lines(partial: dict[str, str], task: str, text: str) -> list[str]:
    """The complete lines of `text` after what `partial` held for `task`; an unfinished last line
    is kept in `partial` until the next chunk ends it (a log read may stop mid-line)."""
    text = partial.pop(task, "") + text
    lines = text.split("\n")
    if lines and lines[-1] != "":
        partial[task] = lines[-1]
    return lines[:-1]
