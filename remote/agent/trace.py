"""An opt-in trace of where a host's part of `up` spends its time: timestamps in a file.

Part of the agent program (`__init__.py`): stdlib only, Python >= 3.8, Linux, no tfctl imports.
Off unless asked for, and then per host: tracing is on when the file `<workdir>/.tfctl/trace.jsonl`
exists (the agent appends to it and never creates it), or when the agent's own environment names
a file in `TFCTL_TRACE`. `benchmarks/up_trace.py` creates the file on each lab host, runs held
`up`s and reads the lines back. Each line is one JSON object: `t` (time.time(), the host's clock),
`ev` (what happened: `up_check`, `up_check.reply`, `up_go`, `prepared`, `launched`, `watching`,
`waiting`, `look` for each full look of the wait for ports, `waited`, `status`, `up_go.reply`),
`pid` (the agent's), and the event's own fields (`run`, `tasks`, `settled`).

Off, `mark` costs one dictionary lookup per call after the first: the answer of whether to trace
is looked up once per agent process and workdir.
"""

from __future__ import annotations

import os
import time
from typing import Any

from tfctl.remote.agent.wire import json_dumps

TRACE_NAME = ".tfctl/trace.jsonl"
_trace_files: dict[str, str | None] = {}
"""Per workdir: the trace file to append to, or None (tracing off): looked up once."""


def trace_file(workdir: str) -> str | None:
    """Where this agent traces for `workdir`, or None when tracing is off."""
    if workdir not in _trace_files:
        named = os.environ.get("TFCTL_TRACE")
        here = os.path.join(workdir, TRACE_NAME)
        _trace_files[workdir] = named or (here if os.path.isfile(here) else None)
    return _trace_files[workdir]


def mark_run(run_dir: str, event: str, **fields: Any) -> None:
    """`mark` for the workdir of the run directory `run_dir` (`<workdir>/.tfctl/runs/<id>`)."""
    mark(os.path.dirname(os.path.dirname(os.path.dirname(run_dir))), event, **fields)


def mark(workdir: str, event: str, **fields: Any) -> None:
    """Append `event` with the time now to the trace of `workdir`, when tracing is on."""
    path = trace_file(workdir)
    if path is None:
        return
    line = json_dumps(dict(fields, t=time.time(), ev=event, pid=os.getpid())) + "\n"
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    except OSError:
        return  # a trace is a measurement: it never fails the operation
    try:
        os.write(fd, line.encode())  # one write with O_APPEND: lines never interleave
    except OSError:
        pass
    finally:
        os.close(fd)
