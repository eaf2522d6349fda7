"""The holder's frames and keys (remote/connect/hold/protocol.py), apart from any socket's owner."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tfctl.inventory.model import Host
from tfctl.remote.connect import openssh
from tfctl.remote.connect.hold import protocol
from tfctl.remote.connect.transport import SshOptions
from tfctl.remote.errors import AuthRefused, HostKeyRefused, HostUnreachable, RemoteError


def _host(**changed: object) -> Host:
    fields: dict[str, object] = dict(name="h1", address="10.0.0.1", user="me", port=22,
                                     identity_file="/k", known_hosts="/kh", jump=None,
                                     workdir="~/w", python="python3", env={}, gpus=(0,), ps=1)
    fields.update(changed)
    return Host(**fields)  # type: ignore[arg-type]


@pytest.mark.parametrize("payload", [b"", b"x", b"\x00\n" * 40000])
def test_a_frame_arrives_whole(payload: bytes) -> None:
    a, b = socket.socketpair()
    with a, b:
        protocol.send_frame(a, protocol.SEND, payload)
        protocol.send_json(a, protocol.READ, {"timeout_s": None})
        assert protocol.recv_frame(b) == (protocol.SEND, payload)
        assert protocol.recv_frame(b) == (protocol.READ, b'{"timeout_s": null}')


def test_a_closed_peer_is_eof_not_a_short_frame() -> None:
    a, b = socket.socketpair()
    with b:
        a.sendall(protocol.SEND + b"\x00\x00\x00\x05abc")  # 3 of 5 bytes, then gone
        a.close()
        with pytest.raises(EOFError):
            protocol.recv_frame(b)


def test_links_are_kept_under_ssh_settings_and_key_policy_only() -> None:
    key = protocol.link_key(protocol.link_fields(_host(), SshOptions()))
    # Tasks, workdir and interpreter are not the connection's; the persist time is not either.
    assert key == protocol.link_key(protocol.link_fields(_host(workdir="/x", gpus=(), ps=0),
                                                   SshOptions(persist_s=9)))
    for other in (protocol.link_fields(_host(port=2222), SshOptions()),
                  protocol.link_fields(_host(known_hosts="/other"), SshOptions()),
                  protocol.link_fields(_host(jump="bastion"), SshOptions()),
                  protocol.link_fields(_host(), SshOptions(accept_new_host_keys=True))):
        assert protocol.link_key(other) != key


def test_an_edited_ssh_config_is_another_connection(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / ".ssh").mkdir()
    config = tmp_path / ".ssh" / "config"
    config.write_text("Host h1\n  HostName 10.0.0.1\n")
    stamp = openssh.config_stamp()
    assert openssh.config_stamp() == stamp
    config.write_text("Host h1\n  HostName 10.0.0.99\n")
    assert openssh.config_stamp() != stamp
    fields = protocol.link_fields(_host(), SshOptions())
    assert protocol.link_key(fields) != protocol.link_key(dict(fields, config="other"))


def test_the_holder_opens_the_host_the_command_named() -> None:
    host, options = protocol.host_from(protocol.link_fields(_host(), SshOptions(3.0, True, 60)))
    assert (host.name, host.address, host.user, host.port, host.identity_file,
            host.known_hosts, host.jump) == ("h1", "10.0.0.1", "me", 22, "/k", "/kh", None)
    assert options == SshOptions(3.0, True, 60)


@pytest.mark.parametrize("error", [
    HostUnreachable("h1", "no answer within 5 s", "tail"),
    HostKeyRefused("h1", "host key of 10.0.0.1 changed"),
    AuthRefused("h1", "key refused"),
    RemoteError("h1", "agent failed", "detail", kind="agent"),
])
def test_an_error_the_holder_met_is_the_same_error_in_the_command(error: RemoteError) -> None:
    again = protocol.error_from(protocol.error_fields(error))
    assert type(again) is type(error)
    assert (again.host, again.what, again.detail, again.kind) == \
        (error.host, error.what, error.detail, error.kind)


def test_the_socket_folder_is_the_users_alone(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    path = protocol.socket_path()
    assert path.parent == tmp_path / "tfctl" and path.suffix == ".sock"
    assert path.parent.stat().st_mode & 0o777 == 0o700
    monkeypatch.delenv("XDG_RUNTIME_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    assert protocol.socket_path().parent == tmp_path / "cache" / "tfctl" / "hold"


STARTER_THAT_LEAVES = """
import os, subprocess, sys
from tfctl.remote.connect.hold import protocol
path = sys.argv[1]
server, lock = protocol.bind(path)
holder = subprocess.Popen(
    [sys.executable, "-m", "tfctl.remote.connect.hold.holder", path, "0.5", str(lock),
     str(server.fileno()), str(os.getpid())],
    stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, start_new_session=True,
    close_fds=True, pass_fds=(lock, server.fileno()))
print(holder.pid, flush=True)
os._exit(0)  # gone before the holder's interpreter has started
"""


def test_a_holder_whose_starter_left_before_it_looked_ends_after_its_persist_time(
    tmp_path: Path,
) -> None:
    """The starter is told by the pid it passes, not by the holder's parent at its first look:
    a starter gone by then leaves init as the parent, which is no client."""
    path = str(tmp_path / "h.sock")
    started = subprocess.run([sys.executable, "-c", STARTER_THAT_LEAVES, path],
                             capture_output=True, text=True, check=True, timeout=60)
    pid = int(started.stdout.split()[0])
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and os.path.exists(f"/proc/{pid}") \
            and _state(pid) != "Z":
        time.sleep(0.2)
    alive = os.path.exists(f"/proc/{pid}") and _state(pid) != "Z"
    if alive:
        os.kill(pid, 15)
    assert not alive, "the holder outlived its persist time: it took init for its starter"
    assert not os.path.exists(path)  # it removed its socket on its way out


def _state(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return "gone"
