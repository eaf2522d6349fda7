"""Calling the host-side agent: one round trip, one JSON answer, failures as `RemoteError`s."""

from __future__ import annotations

import json
from typing import Any

from tfctl.remote.agent import agent_program
from tfctl.remote.errors import CommandFailed, RemoteError
from tfctl.remote.transport import Transport, python_program_command

# A host's python that cannot even start answers with the shell's "not found" status.
_NOT_FOUND = (126, 127)


def call(transport: Transport, op: str, args: dict[str, Any] | None = None,
         timeout_s: float | None = 60.0) -> Any:
    """Run agent operation `op` on the transport's host and return its `result`."""
    host = transport.host
    command = python_program_command(host.python)
    res = transport.run(command, stdin=agent_program(op, args or {}), timeout_s=timeout_s)
    answer = _last_json(res.stdout)
    if answer is None:
        if res.exit_code in _NOT_FOUND:
            raise RemoteError(host.name, f"python {host.python!r} is not runnable there "
                              f"(exit {res.exit_code}): set `python:` for this host in the "
                              "inventory", res.tail(5), kind="python_missing")
        raise CommandFailed(host.name, command + f"  # agent op {op}", res.exit_code, res.tail())
    if not answer.get("ok"):
        raise RemoteError(host.name, str(answer.get("error", "agent failed")),
                          str(answer.get("detail", "")), kind=str(answer.get("kind", "agent")),
                          data=answer)
    return answer.get("result")


def _last_json(stdout: str) -> dict[str, Any] | None:
    for line in reversed(stdout.strip().splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                value = json.loads(line)
            except ValueError:
                return None
            return value if isinstance(value, dict) else None
    return None
