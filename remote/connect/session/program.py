"""The agent program as sent to hosts: the agent files joined into one stdlib-only module.

Client side only. The `from tfctl...` lines of the agent files (and imports used only for
annotations) are cut, since on a host the files are one module and nothing of tfctl is
installed. The cut is a scan of top-level import statements rather than `ast.parse` (12 ms of
every command); tests/testbed/test_agent.py checks that both agree.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

from tfctl.remote.agent.wire import WIRE_VERSION

AGENT_FILES = ("wire.py", "vocab.py", "proc.py", "jsonfile.py", "rundir.py", "tasklog.py",
               "detach.py", "supervisor.py", "state.py", "sync.py", "wait.py", "tfprobe.py",
               "freeports.py", "notify.py", "nvfields.py", "speed.py", "disk.py", "record.py",
               "claims.py", "energy.py", "watch.py", "hostops.py", "runops.py", "up.py", "boot.py",
               "lost.py", "lab.py", "tickets.py", "optable.py")
"""The agent's files in the order they are joined: a file's top-level names (a record's base
class, a default value, a module constant) are defined before a file that uses them at import
time; names a function reads are found when it runs."""
# Imported only for building the program or for annotations (strings under `from __future__
# import annotations`): cut from the program, saving ~10 ms of imports at each agent start.
CLIENT_ONLY_MODULES = ("tfctl", "__future__", "ast", "pathlib", "typing")
AGENT_DIR = Path(__file__).resolve().parents[2] / "agent"
"""remote/agent/, the agent files' folder (this file is in remote/connect/session/)."""


@functools.lru_cache(maxsize=1)
def agent_source() -> str:
    """The agent program without its request: the agent files, client imports cut."""
    parts = ["from __future__ import annotations\n"]
    for name in AGENT_FILES:
        lines = (AGENT_DIR / name).read_text().splitlines(keepends=True)
        cut = client_import_lines(lines)
        parts.append("".join(line for i, line in enumerate(lines) if i not in cut))
    return "\n".join(parts)


def client_import_lines(lines: list[str]) -> set[int]:
    """Indices of the lines of top-level imports whose modules are all `CLIENT_ONLY_MODULES`."""
    cut: set[int] = set()
    i = 0
    while i < len(lines):
        line = lines[i]
        start = i
        if line.startswith(("import ", "from ")):
            while "(" in lines[start] and ")" not in lines[i] and i + 1 < len(lines):
                i += 1
            if all(m.split(".")[0] in CLIENT_ONLY_MODULES for m in _modules(line)):
                cut.update(range(start, i + 1))
        i += 1
    return cut


def _modules(statement: str) -> list[str]:
    words = statement.split()
    if words[0] == "from":
        return [words[1]]
    names = statement[len("import "):].split("#")[0]
    return [part.split()[0] for part in names.split(",") if part.strip()]


def render_request(source: str, op: str, args: dict[str, Any]) -> str:
    """`source` with the request (in this tfctl's version of the wire) appended as its last line
    (JSON inside a Python string)."""
    request = dict(args, op=op, v=WIRE_VERSION)
    return f"{source}\nmain(json.loads({json.dumps(request)!r}))\n"


def agent_program(op: str, args: dict[str, Any]) -> str:
    """The full program text to send to `<python> -` on a host for one operation."""
    return render_request(agent_source(), op, args)
