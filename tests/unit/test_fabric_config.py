"""The one Fabric Config every connection shares (connection.py): connections built in many
threads at once, as a command reaching 16 hosts (or reconnecting a healed one beside the others'
commands) builds them, and the config left as it was built.

invoke's Config applies a change by emptying its merged dict and filling it again; Fabric's
`Connection.__init__` sets `inline_ssh_env`, which a plain Connection stores into its config.
Another thread building a Connection meanwhile read an empty config: `AttributeError: No
attribute or config key found for 'connect_kwargs'` (`Valid keys: []`). Threads are switched
every microsecond here so the window a change opens is met within a few hundred connections."""

from __future__ import annotations

import copy
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tfctl.inventory.model import Host
from tfctl.remote.connect.connection import HostConnection, QuickRemote, fabric_config
from tfctl.remote.connect.sshconfig import Target
from tfctl.remote.connect.transport import SshOptions


def host(tmp_path: Path, name: str) -> Host:
    return Host(name=name, address=name, user="u", port=22, identity_file=None,
                known_hosts=str(tmp_path / "known_hosts"), jump=None, workdir="~/w",
                python="python3", env={}, gpus=(), ps=0)


@pytest.fixture
def fast_switching() -> Iterator[None]:
    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        yield
    finally:
        sys.setswitchinterval(before)


def test_connections_built_in_many_threads_at_once_all_succeed(tmp_path: Path,
                                                               fast_switching: None) -> None:
    (tmp_path / "known_hosts").write_text("")
    options = SshOptions()
    errors: list[str] = []
    built: list[int] = []

    def build(i: int) -> None:
        h = host(tmp_path, f"h{i}")
        jump = Target(hostname="gw", port=22, user="u")
        for _ in range(60):
            try:
                hop = HostConnection(h, jump, options, None)
                conn = HostConnection(h, Target(hostname=h.name, port=22, user="u",
                                                key_filenames=("/k",)), options, hop)
                assert conn.gateway is hop and conn.connect_kwargs["key_filename"] == ["/k"]
                assert conn.config.runners.remote is QuickRemote
                built.append(1)
            except Exception as exc:  # the race's AttributeError, or anything else
                errors.append(f"{type(exc).__name__}: {str(exc).splitlines()[0]}")

    threads = [threading.Thread(target=build, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and len(built) == 8 * 60


def test_building_and_closing_a_connection_leaves_the_shared_config_as_built(
        tmp_path: Path) -> None:
    """The invariant the race needs broken: nothing a connection does writes into the config
    all threads read (a write would re-merge it under them)."""
    (tmp_path / "known_hosts").write_text("")
    config = fabric_config()
    merged, modifications = copy.deepcopy(config._config), copy.deepcopy(config._modifications)
    h = host(tmp_path, "h1")
    hop = HostConnection(h, Target(hostname="gw", port=22, user="u"), SshOptions(), None)
    conn = HostConnection(h, Target(hostname="h1", port=2222, user="u"), SshOptions(), hop)
    assert conn.inline_ssh_env is True  # Fabric's default, kept on the connection itself
    conn.close()
    hop.close()
    assert config._config == merged and config._modifications == modifications == {}
    assert config.runners.remote is QuickRemote


def test_a_write_into_the_shared_config_raises_with_its_key_and_is_never_merged() -> None:
    config = fabric_config()
    try:
        with pytest.raises(TypeError, match=r"'timeouts\.connect' was set"):
            config.timeouts.connect = 3
        with pytest.raises(TypeError, match="'user' was set"):
            del config.user
        assert config._modifications == {} and config._deletions == {}
    finally:
        fabric_config.cache_clear()  # the next test's config as built
    assert fabric_config() is not config and fabric_config().timeouts.connect is None
