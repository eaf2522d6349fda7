"""The agent's wire: its line markers, its version, and the failure an answer carries
(`AgentError`); shared by the agent (host) and agentclient (here).

Its own file, first in the agent program, so that the client can read them without importing the
agent's modules (~15 ms of every command's start).
"""

from __future__ import annotations

from typing import Any

ANSWER_MARK = "\x1etfctl-answer "
"""Starts the line that carries an answer: nothing else a child prints is taken for one."""
ACK_LINE = "\x1etfctl-ack\n"
"""Sent as soon as a request line arrives: a silent idle session means a dead link."""
WIRE_VERSION = 1
"""The vocabulary's version (vocab.py): sent in every request (`v`) and every answer; a change
of a record that an older reader would misread takes the next number."""


class AgentError(Exception):
    """A failure with a one-sentence message for a person and a `kind` for the client: the
    operation's answer is `{"ok": false, "kind": kind, "error": message, **extra}`
    (`optable.main`), which the client raises as the error its kind names (remote/errors.py)."""

    def __init__(self, kind: str, message: str, **extra: Any) -> None:
        super().__init__(message)
        self.kind, self.message, self.extra = kind, message, extra
