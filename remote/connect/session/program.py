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

AGENT_FILES = ("wire.py", "wirerecord.py", "vocab.py", "proc.py", "jsonfile.py", "rundir.py",
               "tasklog.py", "detach.py", "netroute.py", "supervisor.py", "state.py", "sync.py",
               "wait.py", "tfprobe.py", "fwprobe.py", "freeports.py", "notify.py", "nvfields.py",
               "speed.py", "disk.py", "record.py", "claims.py", "policy.py", "energy.py",
               "ledger.py", "recentuse.py", "activity.py", "idlewatch.py", "watch.py", "keeper.py",
               "hostops.py", "runops.py", "up.py", "boot.py", "lost.py", "lab.py", "tickets.py",
               "trace.py", "optable.py")
"""The agent's files in the order they are joined: a file's top-level names (a record's base
class, a default value, a module constant) are defined before a file that uses them at import
time; names a function reads are found when it runs."""
# Imported only for building the program or for annotations (strings under `from __future__
# import annotations`): cut from the program, saving ~10 ms of imports at each agent start.
CLIENT_ONLY_MODULES = ("tfctl", "__future__", "ast", "pathlib", "typing", "collections")
DEFERRED_MODULES = ("json", "re", "signal", "contextlib", "functools")
"""Modules the agent files import at their top that the program imports on first use: their
`import` lines are cut and the names bound to `wire.LaterModule`s, so that an agent start pays
only for those its requests use (the module-level code of the agent files must not use them)."""
AGENT_DIR = Path(__file__).resolve().parents[2] / "agent"
"""remote/agent/, the agent files' folder (this file is in remote/connect/session/)."""


@functools.lru_cache(maxsize=1)
def agent_source() -> str:
    """The agent program without its request: the agent files, client imports cut."""
    parts = ["from __future__ import annotations\n"]
    for name in AGENT_FILES:
        lines = (AGENT_DIR / name).read_text().splitlines(keepends=True)
        cut = client_import_lines(lines) | client_import_lines(lines, DEFERRED_MODULES, False)
        parts.append("".join([line for i, line in enumerate(lines) if i not in cut]))
        if name == AGENT_FILES[0]:  # wire.py: LaterModule is defined
            parts.append("".join(f"{m} = LaterModule({m!r}, globals())\n"
                                 for m in DEFERRED_MODULES))
    return "\n".join(parts)


def client_import_lines(lines: list[str], modules: tuple[str, ...] = CLIENT_ONLY_MODULES,
                        from_too: bool = True) -> set[int]:
    """Indices of the lines of top-level imports whose modules are all in `modules` (`import
    M` statements only, unless `from_too`)."""
    cut: set[int] = set()
    i = 0
    quote: str | None = None  # the triple quote of a string open across lines
    while i < len(lines):
        line = lines[i]
        start = i
        if quote is None and line.startswith(("import ", "from ") if from_too else "import "):
            while "(" in lines[start] and ")" not in lines[i] and i + 1 < len(lines):
                i += 1
            if all(m.split(".")[0] in modules for m in _modules(line)):
                cut.update(range(start, i + 1))
        elif '"""' in line or "'''" in line:  # a program held in a string keeps its imports
            quote = _still_open(line, quote)
        i += 1
    return cut


def _still_open(line: str, quote: str | None) -> str | None:
    """The triple quote of a string still open after `line`, given the one open before it."""
    at = 0
    while True:
        if quote is None:
            found = [(line.find(q, at), q) for q in ('"""', "'''") if line.find(q, at) >= 0]
            if not found:
                return None
            at, quote = min(found)
        else:
            at = line.find(quote, at)
            if at < 0:
                return quote
            quote = None
        at += 3


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
    return f"{source}\nmain(json_loads({json.dumps(request)!r}))\n"


def agent_program(op: str, args: dict[str, Any]) -> str:
    """The full program text to send to `<python> -` on a host for one operation."""
    return render_request(agent_source(), op, args)
