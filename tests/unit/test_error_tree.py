"""The remote error tree and the transports' declared capabilities.

An agent's error answer becomes the class its `kind` names, so callers catch classes; every
transport and agent session has each member its Protocol declares, with a transport that
cannot answering None (`transport: local`: no sessions, no SSH link, no SFTP).
"""

from __future__ import annotations

import socket
import sys
import threading
from pathlib import Path
from types import SimpleNamespace

import pytest

from tfctl.inventory.model import Host
from tfctl.remote.connect.hold.borrow import HeldPipe, HeldTransport
from tfctl.remote.connect.local import LocalTransport
from tfctl.remote.connect.session import agentclient
from tfctl.remote.connect.ssh import SshPipe, SshTransport
from tfctl.remote.connect.transport import Pipe, Transport
from tfctl.remote.errors import (
    AgentFailed,
    AgentMissing,
    AgentUnavailable,
    CommandFailed,
    NoRun,
    PortTaken,
    PythonMissing,
    RemoteError,
    RunLive,
    agent_error,
)


@pytest.mark.parametrize(("kind", "cls"), [
    ("run_live", RunLive), ("port_taken", PortTaken), ("no_run", NoRun),
    ("agent_missing", AgentMissing), ("python_missing", PythonMissing),
])
def test_an_agent_answer_becomes_the_class_its_kind_names(kind: str, cls: type) -> None:
    answer = {"ok": False, "kind": kind, "error": "it went wrong", "detail": "tail",
              "run_id": "r7"}
    error = agent_error("h1", answer)
    assert type(error) is cls
    assert (str(error), error.detail, error.kind, error.data) == \
        ("h1: it went wrong", "tail", kind, answer)


def test_an_agent_answer_of_another_kind_is_an_agent_failure_that_keeps_it() -> None:
    error = agent_error("h1", {"ok": False, "kind": "internal", "error": "boom"})
    assert type(error) is AgentFailed and error.kind == "internal"
    assert type(agent_error("h1", {"ok": False})) is AgentFailed


def test_the_tree() -> None:
    assert issubclass(PythonMissing, AgentUnavailable) and issubclass(AgentMissing,
                                                                      AgentUnavailable)
    for cls in (RunLive, PortTaken, NoRun):
        assert issubclass(cls, AgentFailed)
    for cls in (AgentUnavailable, AgentFailed):
        assert issubclass(cls, RemoteError)


def test_a_python_that_does_not_start_is_python_missing_and_another_exit_a_failed_command(
        ) -> None:
    t = SimpleNamespace(host=SimpleNamespace(name="h1", python="/opt/py9/bin/python"))
    missing = agentclient._no_answer(t, "probe", 127, "sh: not found")  # type: ignore[arg-type]
    assert isinstance(missing, PythonMissing) and missing.kind == "python_missing"
    assert "python '/opt/py9/bin/python' is not runnable there (exit 127)" in str(missing)
    died = agentclient._no_answer(t, "probe", 1, "Traceback")  # type: ignore[arg-type]
    assert isinstance(died, CommandFailed)


def _members(protocol: type) -> set[str]:
    return {name for name in vars(protocol) if not name.startswith("_")} | set(
        getattr(protocol, "__annotations__", {}))


def _lacks(obj: object, protocol: type) -> set[str]:
    """The members `protocol` declares that `obj` has neither on its class nor itself."""
    return {m for m in _members(protocol)
            if not any(m in vars(k) for k in type(obj).__mro__) and m not in vars(obj)}


@pytest.mark.parametrize("cls", [SshTransport, LocalTransport, HeldTransport])
def test_every_transport_has_what_the_protocol_declares(cls: type, tmp_path: Path) -> None:
    host = _host(tmp_path)
    made = cls(host) if cls is LocalTransport else cls(host, SimpleNamespace())
    assert _lacks(made, Transport) == set()


def test_every_agent_session_has_what_the_protocol_declares() -> None:
    ours, theirs = socket.socketpair()
    with ours, theirs:
        for pipe in (SshPipe(SimpleNamespace()), HeldPipe(theirs, reused=True)):  # type: ignore[arg-type]
            assert _lacks(pipe, Pipe) == set()


def test_a_local_transport_has_no_sessions_no_ssh_link_and_no_sftp(tmp_path: Path) -> None:
    t = LocalTransport(_host(tmp_path))
    assert (t.open_pipe("true"), t.paramiko_transport, t.sftp()) == (None, None, None)
    t.drop_link()  # nothing to drop


def test_a_local_transport_relays_a_command_through_a_socket(tmp_path: Path) -> None:
    t = LocalTransport(_host(tmp_path))
    ours, theirs = socket.socketpair()
    got: list[tuple[int | None, str]] = []
    relay = threading.Thread(target=lambda: got.append(
        t.relay(theirs, "tr a-z A-Z; echo said >&2")))
    relay.start()
    ours.sendall(b"hello\n")
    ours.shutdown(socket.SHUT_WR)
    back = b""
    while chunk := ours.recv(1024):
        back += chunk
        if back.endswith(b"\n"):
            break
    relay.join(10)
    ours.close()
    theirs.close()
    assert back == b"HELLO\n"
    assert got == [(0, "said\n")]


def _host(tmp_path: Path) -> Host:
    return Host(name="box", address="127.0.0.1", user=None, port=None, identity_file=None,
                known_hosts="/dev/null", jump=None, workdir=str(tmp_path / "work"),
                python=sys.executable, env={}, gpus=(), ps=0, transport="local")
