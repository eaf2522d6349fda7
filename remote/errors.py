"""Remote failures as values that say, in one sentence, which host, what, and why.

`RemoteError.__str__` is the message the CLI prints (no traceback); `detail` carries the
command's last lines of output where there is one, as invoke's `UnexpectedExit` does.

Every failure a caller tells apart is a class; callers catch the class, never compare `kind`.
`kind` is the failure's name on the wire (the agent's answers, the holder's frames) and in
records that outlive the exception (a host's last poll error). The tree, as httpx's
`_exceptions.py` draws its own (encode/httpx, httpx/_exceptions.py):

    RemoteError                a host failed what was asked of it
    ├── HostUnreachable        no answer: connect refused or timed out, the link dropped
    ├── HostKeyRefused         the host's key is not the one known_hosts names
    ├── AuthRefused            no key or password was accepted
    ├── CommandFailed          a remote command exited non-zero
    ├── AgentUnavailable       the host-side agent cannot run there
    │   ├── PythonMissing      the host's python does not start (exit 126/127)
    │   ├── AgentMissing       the agent's program could not be loaded
    │   └── AgentOutdated      the agent speaks another wire version (an older tfctl's session)
    ├── AgentFailed            the agent ran and answered with an error (`data`: the answer)
    │   ├── RunLive            another run is still live on the host (`data["run_id"]`)
    │   ├── PortTaken          a port the plan leased was taken before the task bound it
    │   └── NoRun              the host has no record of the run asked about
    ├── LaunchFailed           `up` could not start the job there (`cleaned`: what its
    │                          rollback stopped, runs/up/rollback.py)
    └── FleetError             the run or the lab as a whole failed, no one host (`host` is "")
        └── GpusBusy           GPUs the plan assigns are held by others

Failures of one step keep their own classes beside the step (`TunnelError` in
connect/tunnel.py, `EngineRefused` (a FleetError) in
engines/engine.py, `SlurmSilent` (a FleetError) in engines/slurm_read.py, ...), each a
`RemoteError`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import ClassVar


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


class AgentUnavailable(RemoteError):
    """The host-side agent cannot run on the host: nothing it would do was done."""

    KIND: ClassVar[str] = "agent_unavailable"

    def __init__(self, host: str, what: str, detail: str = "",
                 data: Mapping[str, object] | None = None):
        super().__init__(host, what, detail, kind=self.KIND, data=dict(data or {}))


class PythonMissing(AgentUnavailable):
    """The host's `python:` does not start (the shell's "not found" status, 126 or 127)."""

    KIND = "python_missing"


class AgentMissing(AgentUnavailable):
    """The agent's program was neither installed on the host nor sent to it."""

    KIND = "agent_missing"


class AgentOutdated(AgentUnavailable):
    """The agent answered in another version of the vocabulary (`agent/vocab.py`, `v`): a
    session an older (or newer) tfctl started. Its answer is not read; `data` holds it."""

    KIND = "wire_version"


class AgentFailed(RemoteError):
    """The agent ran and answered a request with an error: `kind` is the name it gave, `data`
    its whole answer."""

    KIND: ClassVar[str] = "agent"

    def __init__(self, host: str, what: str, detail: str = "", kind: str | None = None,
                 data: Mapping[str, object] | None = None):
        super().__init__(host, what, detail, kind=kind or self.KIND, data=dict(data or {}))


class RunLive(AgentFailed):
    """Another run is still live on the host: `data["run_id"]` names it."""

    KIND: ClassVar[str] = "run_live"


class PortTaken(AgentFailed):
    """A port the plan leased for a task was taken on the host before the task bound it."""

    KIND: ClassVar[str] = "port_taken"


class NoRun(AgentFailed):
    """The host has no record of the run asked about."""

    KIND: ClassVar[str] = "no_run"


_AGENT_KINDS: dict[str, type[AgentUnavailable] | type[AgentFailed]] = {
    cls.KIND: cls for cls in (PythonMissing, AgentMissing, AgentOutdated, RunLive, PortTaken,
                              NoRun)}


def agent_error(host: str, answer: Mapping[str, object]) -> RemoteError:
    """The error an agent's `{"ok": false, "kind": ..., "error": ...}` answer stands for: the
    class its `kind` names, else `AgentFailed` carrying that kind."""
    kind = str(answer.get("kind", "agent"))
    what, detail = str(answer.get("error", "agent failed")), str(answer.get("detail", ""))
    cls = _AGENT_KINDS.get(kind)
    if cls is None:
        return AgentFailed(host, what, detail, kind=kind, data=answer)
    return cls(host, what, detail, data=answer)


class LaunchFailed(RemoteError):
    """`up` could not start the job on `host`; `detail` holds the failing task's log tail and
    `cleaned` what the rollback stopped (runs/up/rollback.py), once it has run."""

    def __init__(self, host: str, what: str, detail: str = "", cleaned: str = ""):
        super().__init__(host, what, detail, kind="launch")
        self.cleaned = cleaned

    def full(self) -> str:
        text = super().full()
        return f"{text}\nrolled back: {self.cleaned}" if self.cleaned else text


class FleetError(RemoteError):
    """A failure of the run or the lab as a whole, no one host's (no host remembers the run, GPUs
    busy across the plan, an engine that cannot do what was asked): `host` is empty and the
    message is `what` alone."""

    def __init__(self, what: str, detail: str = "", kind: str = "fleet") -> None:
        super().__init__("", what, detail, kind=kind)

    def __str__(self) -> str:
        return self.what


class OverLimit(FleetError):
    """The lab policy's GPUs per user refuse the request now (its sentence names the limit
    and the user's GPUs): nothing was started."""

    def __init__(self, what: str) -> None:
        super().__init__(what, kind="policy_limit")


class GpusBusy(FleetError):
    """GPUs the plan assigns are held by processes that are not this run's, or claimed by another
    user's run or reservation (remote/lab/claims.py): nothing was started.

    `holders` are one line per busy GPU (host, GPU, pid, user, memory; or who reserved it until
    when); `free` says which GPUs
    are free instead. `up(UpOptions(force=True))` launches anyway.
    """

    def __init__(self, holders: tuple[str, ...], free: str) -> None:
        self.holders = holders
        self.free = free
        super().__init__("GPUs the plan assigns are in use or reserved by others: "
                         + "; ".join(holders), kind="gpus_busy")


def _short(command: str, limit: int = 120) -> str:
    command = " ".join(command.split())
    return command if len(command) <= limit else command[: limit - 1] + "…"
