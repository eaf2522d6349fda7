"""Every operation of the agent, by the name the client sends: its handler and its request, and
the agent's entry points, `main` (one request) and `serve` (a session of them).

Part of the agent program (`__init__.py`): stdlib only, Python >= 3.8, Linux, no tfctl imports.
Last in the program: the table names the handlers of every module before it, and is the only
place an operation is added.

An answer is `{"ok": true, "v": WIRE_VERSION, "result": ...}` or `{"ok": false, "v": ...,
"error": "<one sentence>", "kind": "<machine-readable>", ...}`. A request carries the client's
`v`; one of another version, or of none, is refused (kind `wire_version`) before anything is
done, so that a client and an agent of different tfctl versions never act on each other's
misread words. A request is read into its record (vocab.py), whose `REQUIRED` fields it must
have (kind `bad_request`), and each operation answers with a record.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from tfctl.remote.agent.hostops import (
    hostname,
    op_connect,
    op_listen,
    op_ports,
    op_probe,
    op_procs,
    op_put_files,
    op_sync_diff,
)
from tfctl.remote.agent.lab import op_claims, op_lab, op_lab_policy, op_release
from tfctl.remote.agent.ledger import op_usage
from tfctl.remote.agent.lost import op_restart_lost
from tfctl.remote.agent.runops import (
    op_finish,
    op_launch,
    op_logs,
    op_prepare,
    op_runs,
    op_status,
    op_stop,
    op_wait_ports,
)
from tfctl.remote.agent.tickets import (
    op_gpu_state,
    op_reserve_in_policy,
    op_ticket_drop,
    op_ticket_put,
)
from tfctl.remote.agent.up import op_up_check, op_up_go, op_up_mark
from tfctl.remote.agent.vocab import (
    ClaimsRequest,
    ConnectRequest,
    FinishRequest,
    GpuStateRequest,
    LabPolicyRequest,
    LabRequest,
    LaunchRequest,
    ListenRequest,
    LogsRequest,
    PortsRequest,
    PrepareRequest,
    ProbeRequest,
    ProcsRequest,
    PutFilesRequest,
    ReleaseRequest,
    ReserveRequest,
    RunRef,
    RunsRequest,
    StatusRequest,
    StopRequest,
    SyncDiffRequest,
    TicketRequest,
    UpCheckRequest,
    UpGoRequest,
    UsageRequest,
    WaitPortsRequest,
)
from tfctl.remote.agent.wire import (
    ACK_LINE,
    ANSWER_MARK,
    WIRE_VERSION,
    AgentError,
    json_dumps,
    json_loads,
)
from tfctl.remote.agent.wirerecord import Wire

OPS: dict[str, tuple[Callable[[Any], Wire], type[Wire]]] = {
    # op name: (handler, its request's record)
    "probe": (op_probe, ProbeRequest),
    "ports": (op_ports, PortsRequest),
    "listen": (op_listen, ListenRequest),
    "connect": (op_connect, ConnectRequest),
    "procs": (op_procs, ProcsRequest),
    "sync_diff": (op_sync_diff, SyncDiffRequest),
    "put_files": (op_put_files, PutFilesRequest),
    "prepare": (op_prepare, PrepareRequest),
    "launch": (op_launch, LaunchRequest),
    "wait_ports": (op_wait_ports, WaitPortsRequest),
    "status": (op_status, StatusRequest),
    "stop": (op_stop, StopRequest),
    "finish": (op_finish, FinishRequest),
    "runs": (op_runs, RunsRequest),
    "logs": (op_logs, LogsRequest),
    "up_check": (op_up_check, UpCheckRequest),
    "up_go": (op_up_go, UpGoRequest),
    "up_mark": (op_up_mark, RunRef),
    "restart_lost": (op_restart_lost, RunRef),
    "lab": (op_lab, LabRequest),
    "lab_policy": (op_lab_policy, LabPolicyRequest),
    "claims": (op_claims, ClaimsRequest),
    "reserve": (op_reserve_in_policy, ReserveRequest),
    "release": (op_release, ReleaseRequest),
    "gpu_state": (op_gpu_state, GpuStateRequest),
    "ticket_put": (op_ticket_put, TicketRequest),
    "ticket_drop": (op_ticket_drop, TicketRequest),
    "usage": (op_usage, UsageRequest),
}


def answer_to(req: dict[str, Any]) -> dict[str, Any]:
    """The result of one request (its record as wire data), or AgentError."""
    op = str(req.get("op"))
    version = req.get("v")
    if version != WIRE_VERSION:
        said = "no version" if version is None else f"version {version}"
        raise AgentError("wire_version", f"the agent on {hostname()} speaks wire version "
                         f"{WIRE_VERSION}, the request {said}: nothing was done")
    found = OPS.get(op)
    if found is None:
        raise AgentError("unknown_op", f"unknown agent operation {req.get('op')!r}")
    handler, request = found
    typed = request.from_wire(req)
    missing = typed.missing()
    if missing:
        key = request.WIRE_NAMES.get(missing[0], missing[0])
        raise AgentError("bad_request", f"the {op} request needs '{key}'")
    return handler(typed).to_wire()


def main(req: dict[str, Any], mark: str = "") -> None:
    """Run one request and print its answer as the last line of stdout, after `mark`."""
    try:
        answer: dict[str, Any] = {"ok": True, "v": WIRE_VERSION, "result": answer_to(req)}
    except AgentError as exc:
        answer = dict(exc.extra, ok=False, v=WIRE_VERSION, error=exc.message, kind=exc.kind)
    except Exception as exc:  # report any failure as one JSON answer, with its traceback
        answer = {"ok": False, "v": WIRE_VERSION, "kind": "internal",
                  "error": f"agent {req.get('op')} failed on {hostname()}: "
                           f"{type(exc).__name__}: {exc}",
                  "detail": _traceback_text()}
    sys.stdout.write(mark + json_dumps(answer, default=str) + "\n")
    sys.stdout.flush()


def _traceback_text() -> str:
    import traceback  # imported when it is needed: every agent start pays for its imports

    return traceback.format_exc(limit=6)


def serve(stream: Any) -> None:
    """Answer one JSON request per line of `stream` (binary) until it ends: a session.

    tfctl keeps one such session per host for a whole command (agentclient), so an operation
    costs a line each way instead of a new interpreter. Answers carry `ANSWER_MARK`, so that
    anything else a child process might print on our stdout is never taken for an answer. Each
    request is acknowledged at once (`ACK_LINE`): on a session that has been idle, a missing
    acknowledgement tells the client within its connect timeout that the link is dead, however
    long the operation itself may take.
    """
    while True:
        line = stream.readline()
        if not line:
            return
        if not line.strip():
            continue
        sys.stdout.write(ACK_LINE)
        sys.stdout.flush()
        try:
            req = json_loads(line.decode())
        except ValueError as exc:  # UnicodeDecodeError too
            req = {"op": f"<unreadable request: {exc}>"}
        main(req if isinstance(req, dict) else {"op": repr(req)}, ANSWER_MARK)
