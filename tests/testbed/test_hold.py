"""Connections that outlive a command, on the real sshd lab.

A command with `--persist` that finds no holder starts one and borrows its agent sessions from
it; the commands after it, even one typed the moment it returned, borrow the same sessions: the
same agent processes answer `up`, `status` and `down` (none is started, no SSH handshake), and
the run is as whole and as cleanly stopped as without it. The holder ends its sessions and
itself after the persist time; a connection kept under `--accept-new-host-keys` is never lent
to a command without it; a cut host is named unreachable and reconnected after its heal; Ctrl-C
during `up` still leaves nothing of the run; and only the holder's user can reach its socket.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.support.holders import (
    agents,
    holders,
    wait_holders,
    wait_sessions,
    wait_sessions_gone,
)
from tests.support.testbedtools import (
    aliased_jump_inventory,
    bound_ports,
    ctrl_c_up,
    job_dir,
    processes_of_run,
    tfctl,
    wait_until,
)

pytestmark = pytest.mark.testbed


def light(testbed: Any, tmp_path: Path, **job: Any) -> Path:
    spec = {"script": "job.py", "style": "tf_config", "args": ["--forever"], **job}
    return testbed.write_inventory(job_dir(tmp_path) / "cluster.yaml", spec)


def ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    return result.stdout + result.stderr


def test_the_commands_after_the_first_borrow_its_agent_sessions(  # type: ignore[no-untyped-def]
        testbed, tmp_path: Path, held: dict[str, str], down_after) -> None:
    inv = light(testbed, tmp_path)
    down_after.append(inv)
    runtime = Path(held["XDG_RUNTIME_DIR"])
    ok(tfctl(inv, "runs", env=held))  # starts the holder, and opens its sessions through it
    [holder] = wait_holders(runtime)
    kept = wait_sessions(testbed)
    said = ok(tfctl(inv, "up", env=held))
    run_id = said.split("run ", 1)[1].split()[0]
    assert agents(testbed) == kept, "up started agents of its own instead of borrowing"
    assert len(processes_of_run(run_id)) == 6  # ps and worker on each host, all up
    assert "running" in ok(tfctl(inv, "status", env=held))
    assert agents(testbed) == kept
    ok(tfctl(inv, "down", "--grace", "1", env=held))
    assert processes_of_run(run_id) == {}
    assert bound_ports(testbed, {2222, 2223}) == {}
    assert agents(testbed) == kept and holders(runtime) == [holder]


def _started_s(pid: int) -> float:
    """When a process started, in seconds since boot (/proc/PID/stat's starttime)."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat[stat.rindex(")") + 2:].split()[19]) / os.sysconf("SC_CLK_TCK")


def _uptime_s() -> float:
    return float(Path("/proc/uptime").read_text().split()[0])


def test_the_command_typed_right_after_the_first_borrows_its_open_sessions(  # type: ignore[no-untyped-def]
        testbed, tmp_path: Path, held: dict[str, str], down_after) -> None:
    """`up` finds no holder: it starts one and borrows its sessions from the first request on,
    so when `up` returns they are open, idle in the holder, and the `status` typed at once
    borrows those very agents: nothing is opened again after `up`, and `status` waits for no
    holder that is still connecting."""
    inv = light(testbed, tmp_path)
    down_after.append(inv)
    runtime = Path(held["XDG_RUNTIME_DIR"])
    assert holders(runtime) == []
    ok(tfctl(inv, "up", env=held))
    returned_s = _uptime_s()
    right_after = agents(testbed)  # no waiting: what is open the moment `up` returned
    assert all(right_after.values()), f"up's agent sessions were closed: {right_after}"
    assert max(_started_s(p) for pids in right_after.values() for p in pids) <= returned_s
    [holder] = holders(runtime)
    assert "running" in ok(tfctl(inv, "status", env=held))
    assert agents(testbed) == right_after, "status opened sessions instead of borrowing up's"
    assert holders(runtime) == [holder]


def test_two_commands_started_at_once_start_one_holder(  # type: ignore[no-untyped-def]
        testbed, tmp_path: Path, held: dict[str, str]) -> None:
    """The lock is taken before the socket is bound, by the command that starts the holder:
    of two commands finding none at the same moment, one starts it and both borrow from it."""
    inv = light(testbed, tmp_path)
    runtime = Path(held["XDG_RUNTIME_DIR"])
    argv = [sys.executable, "-m", "tfctl.tui", "-i", str(inv), "runs"]
    both = [subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                             env={**os.environ, **held}, cwd=inv.parent) for _ in range(2)]
    for proc in both:
        said, _ = proc.communicate(timeout=120)
        assert proc.returncode == 0 and "Traceback" not in said, said
    assert len(holders(runtime)) == 1


def test_the_holder_ends_its_sessions_after_the_persist_time(  # type: ignore[no-untyped-def]
        testbed, tmp_path: Path, held: dict[str, str]) -> None:
    inv = light(testbed, tmp_path)
    runtime = Path(held["XDG_RUNTIME_DIR"])
    ok(tfctl(inv, "runs", env=dict(held, TFCTL_PERSIST="2")))
    ran_at = time.monotonic()  # its 2 s count from the end of the command that started it
    wait_holders(runtime)
    kept = wait_sessions(testbed)
    wait_until("the holder's exit", lambda: not holders(runtime), 15, every_s=0.05)
    assert time.monotonic() - ran_at >= 2.0  # it kept them its persist time, then went
    wait_sessions_gone(testbed, kept)
    assert not list(runtime.rglob("*.sock"))


def test_a_connection_kept_under_accept_new_is_not_lent_to_a_strict_command(  # type: ignore[no-untyped-def]
        testbed, tmp_path: Path, held: dict[str, str]) -> None:
    known = tmp_path / "known_hosts"
    known.write_text("")
    inv = testbed.write_inventory(job_dir(tmp_path) / "cluster.yaml",
                              {"script": "job.py", "args": ["--forever"]},
                              known_hosts=str(known))
    runtime = Path(held["XDG_RUNTIME_DIR"])
    ok(tfctl(inv, "runs", "--accept-new-host-keys", env=held))
    assert known.read_text().count("\n") >= len(testbed.names)
    wait_holders(runtime)
    wait_sessions(testbed)
    known.write_text("")  # the keys forgotten: a strict command must not get the kept links
    said = ok(tfctl(inv, "runs", env=held))  # `runs` lists what it can, and says why not
    for host in testbed.hosts:
        assert f"{host.name}: host key of {host.address} is not in {known}" in said
    assert known.read_text() == ""
    ok(tfctl(inv, "runs", "--accept-new-host-keys", env=held))


def test_a_cut_host_is_named_and_reconnected_after_its_heal(  # type: ignore[no-untyped-def]
        isolated_testbed, tmp_path: Path, held: dict[str, str]) -> None:
    testbed = isolated_testbed
    inv = light(testbed, tmp_path)
    env = dict(held, TFCTL_CONNECT_TIMEOUT="2")
    ok(tfctl(inv, "runs", env=env))
    wait_sessions(testbed)
    testbed.cut("h3")
    cut = ok(tfctl(inv, "runs", env=env, timeout=60))  # it lists what it can, says why not
    assert "h3: no answer within 2 s" in cut, cut
    testbed.heal("h3")
    assert "✖" not in ok(tfctl(inv, "runs", env=env))  # the dead link was dropped: connected


def test_ctrl_c_while_workers_start_leaves_nothing_of_the_run(  # type: ignore[no-untyped-def]
        testbed, tmp_path: Path, held: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    inv = light(testbed, tmp_path, args=["--forever", "--listen-delay=30", "--delay-types=worker"])
    for key, value in held.items():
        monkeypatch.setenv(key, value)
    ok(tfctl(inv, "runs"))
    kept = wait_sessions(testbed)
    w = ctrl_c_up(inv, lambda w: len(w.started("worker")) == 3, "three workers")
    assert "tfctl: interrupted: stopped ps:0, ps:1, ps:2, worker:0, worker:1, worker:2" in w.text
    run_id = str(w.run_id)
    assert processes_of_run(run_id) == {}
    assert bound_ports(testbed, {2222, 2223}) == {}
    # The holder still lends sessions that answer (the ones `up` had were handed back after
    # its rollback, or ended if it went mid-request).
    assert run_id in ok(tfctl(inv, "runs"))
    assert set(agents(testbed)) == set(kept)


def test_only_the_holders_user_reaches_its_socket(  # type: ignore[no-untyped-def]
        testbed, tmp_path: Path, held: dict[str, str]) -> None:
    if os.getuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root to try the socket as another user")
    inv = light(testbed, tmp_path)
    runtime = Path(held["XDG_RUNTIME_DIR"])
    ok(tfctl(inv, "runs", env=held))
    wait_holders(runtime)
    [sock] = wait_until("a socket", lambda: list(runtime.rglob("*.sock")), 20, every_s=0.05)
    assert sock.stat().st_mode & 0o777 == 0o600
    assert sock.parent.stat().st_mode & 0o777 == 0o700
    for folder in (runtime, sock.parent):  # the way open: the socket itself stays the user's
        folder.chmod(0o755)
    probe = ("import socket, sys; s = socket.socket(socket.AF_UNIX); "
             "s.connect(sys.argv[1]); print('connected')")
    other = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                            sys.executable, "-c", probe, str(sock)],
                           capture_output=True, text=True, timeout=30)
    assert other.returncode != 0 and "connected" not in other.stdout
    assert "Permission denied" in other.stderr


def test_disconnect_closes_the_kept_connections_now(  # type: ignore[no-untyped-def]
        testbed, tmp_path: Path, held: dict[str, str]) -> None:
    inv = light(testbed, tmp_path)
    runtime = Path(held["XDG_RUNTIME_DIR"])
    assert "nothing to close" in ok(tfctl(inv, "disconnect", env=held))
    ok(tfctl(inv, "runs", env=held))
    [holder] = wait_holders(runtime)
    kept = wait_sessions(testbed)
    said = ok(tfctl(inv, "disconnect", env=held))
    assert f"closed 3 kept connection(s) and 3 idle agent session(s) (holder pid {holder})" \
        in said
    assert holders(runtime) == []  # it returned once the holder had gone
    wait_sessions_gone(testbed, kept)


def test_a_session_beyond_the_kept_connections_room_uses_its_own(  # type: ignore[no-untyped-def]
        testbed, tmp_path: Path, held: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    """sshd allows 10 sessions per connection by default: the holder opens at most 8 on one
    kept connection, and a command asking for more gets its own connection, not an error."""
    import json

    from tfctl.inventory.load import load_inventory
    from tfctl.remote.agent.wire import WIRE_VERSION
    from tfctl.remote.connect.hold import borrow
    from tfctl.remote.connect.hold.holder import MAX_SESSIONS_PER_LINK
    from tfctl.remote.connect.session import agentclient
    from tfctl.remote.connect.transport import SshOptions

    for key, value in held.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setattr(borrow, "_path", [])  # this test's socket folder
    inv = light(testbed, tmp_path)
    ok(tfctl(inv, "runs"))
    wait_sessions(testbed)
    host = load_inventory(inv).host("h1")
    t = borrow.HeldTransport(host, SshOptions(persist_s=30))
    command = agentclient.agent_command(host.python, host.workdir)
    pipes = [t.open_pipe(command) for _ in range(MAX_SESSIONS_PER_LINK + 1)]
    try:
        assert [isinstance(p, borrow.HeldPipe) for p in pipes] == \
            [True] * MAX_SESSIONS_PER_LINK + [False]
        for pipe in pipes:  # every one answers
            agentclient._boot(pipe)
            pipe.send(json.dumps({"op": "runs", "workdir": host.workdir,
                                  "v": WIRE_VERSION}).encode() + b"\n")
            answer = agentclient._read_answer(pipe, t, "runs", 30.0, 30.0)
            assert b'"ok": true' in answer
    finally:
        for pipe in pipes:
            release = getattr(pipe, "release", None)
            release(0) if release is not None else pipe.close()
        t.close()


def test_a_host_behind_a_jump_host_is_kept_through_it(  # type: ignore[no-untyped-def]
        testbed, tmp_path: Path, held: dict[str, str]) -> None:
    """The holder opens what the command would: ~/.ssh/config aliases, ProxyJump followed."""
    inv, home = aliased_jump_inventory(testbed, tmp_path, {"script": "job.py",
                                                       "args": ["--forever"]})
    h1 = testbed.host("h1")
    env = dict(held, HOME=str(home))
    ok(tfctl(inv, "runs", env=env))
    kept = wait_until("an agent session on h1 and h2 in the holder",
                      lambda: (a := agents(testbed)) and a["h1"] and a["h2"] and a, 20,
                      every_s=0.05)
    ok(tfctl(inv, "runs", env=env))
    assert {h: agents(testbed)[h] for h in ("h1", "h2")} == {h: kept[h] for h in ("h1", "h2")}
    if testbed.isolated:  # h2's kept session came through h1
        [pid] = kept["h2"]
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        assert any(v.startswith(f"SSH_CONNECTION={h1.address} ".encode()) for v in environ)
