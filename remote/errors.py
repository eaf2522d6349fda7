"""Remote failures as values that say, in one sentence, which host, what, and why.

`RemoteError.__str__` is the message the CLI prints (no traceback); `detail` carries the
command's last lines of output where there is one, as invoke's `UnexpectedExit` does.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class RemoteError(Exception):
    host: str
    what: str
    detail: str = ""
    kind: str = "failed"
    data: dict[str, object] = field(default_factory=dict)

    def __str__(self) -> str:
        return f"{self.host}: {self.what}"

    def full(self) -> str:
        """The message plus the output tail, indented, for printing."""
        if not self.detail.strip():
            return str(self)
        tail = "\n".join("    " + line for line in self.detail.rstrip().splitlines())
        return f"{self}\n{tail}"


class HostUnreachable(RemoteError):
    def __init__(self, host: str, what: str, detail: str = ""):
        super().__init__(host, what, detail, kind="unreachable")


class HostKeyRefused(RemoteError):
    def __init__(self, host: str, what: str, detail: str = ""):
        super().__init__(host, what, detail, kind="host_key")


class AuthRefused(RemoteError):
    def __init__(self, host: str, what: str, detail: str = ""):
        super().__init__(host, what, detail, kind="auth")


class CommandFailed(RemoteError):
    """A remote command exited non-zero: the command, its status and its last lines."""

    def __init__(self, host: str, command: str, exit_code: int, output_tail: str):
        what = f"`{_short(command)}` exited {exit_code}"
        super().__init__(host, what, output_tail, kind="command")
        self.command = command
        self.exit_code = exit_code


class GpusBusy(RemoteError):
    """GPUs the plan assigns are held by processes that are not this run's, or claimed by another
    user's run or reservation (remote/lab/claims.py): nothing was started.

    `holders` are one line per busy GPU (host, GPU, pid, user, memory; or who reserved it until
    when); `free` says which GPUs
    are free instead. `up(UpOptions(force=True))` launches anyway.
    """

    def __init__(self, holders: tuple[str, ...], free: str) -> None:
        self.holders = holders
        self.free = free
        super().__init__("(fleet)", "GPUs the plan assigns are in use or reserved by others: "
                         + "; ".join(holders), kind="gpus_busy")


def _short(command: str, limit: int = 120) -> str:
    command = " ".join(command.split())
    return command if len(command) <= limit else command[: limit - 1] + "…"
