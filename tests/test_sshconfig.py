"""How an inventory host becomes an SSH endpoint over the user's OpenSSH config (sshconfig.py).

The lab test `test_lab_check.py::test_hosts_reached_through_the_users_ssh_config` connects
through such a config for real; these pin the precedence rules on parsed config text.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import paramiko
import pytest

from tfctl.remote.connect.sshconfig import resolve, user_ssh_config
from tfctl.remote.errors import RemoteError

CONFIG = """
Host titan
    HostName 192.168.0.80
    User alice
    Port 2200
    IdentityFile ~/.ssh/id_titan

Host gtx*
    User bob
    ProxyJump alice@bastion:2022

Host bastion
    HostName 10.0.0.1
    IdentityFile ~/.ssh/id_bastion

Host behind-command
    ProxyCommand nc -X connect -x proxy:3128 %h %p

Host *
    User fallback
"""


@pytest.fixture
def config() -> paramiko.SSHConfig:
    return paramiko.SSHConfig.from_text(CONFIG)


def test_an_alias_gets_hostname_user_port_and_key_from_the_config(
        config: paramiko.SSHConfig) -> None:
    t = resolve("titan", config=config)
    assert (t.hostname, t.port, t.user) == ("192.168.0.80", 2200, "alice")
    assert t.key_filenames and t.key_filenames[0].endswith("/.ssh/id_titan")
    assert t.look_for_keys and not t.jumps and t.proxy_command is None


def test_the_inventory_wins_over_the_config(config: paramiko.SSHConfig) -> None:
    t = resolve("titan", user="carol", port=22, identity_file="/keys/lab", config=config)
    assert (t.hostname, t.port, t.user) == ("192.168.0.80", 22, "carol")
    # The inventory's key is offered first and alone with the config's: no default keys.
    assert t.key_filenames[0] == "/keys/lab" and not t.look_for_keys


def test_proxyjump_hops_are_resolved_through_the_config_too(config: paramiko.SSHConfig) -> None:
    t = resolve("gtx970", config=config)
    assert (t.hostname, t.user, t.port) == ("gtx970", "bob", 22)
    (hop,) = t.jumps
    assert (hop.hostname, hop.user, hop.port) == ("10.0.0.1", "alice", 2022)
    assert hop.key_filenames[0].endswith("/.ssh/id_bastion")


def test_the_inventory_jump_replaces_the_configs(config: paramiko.SSHConfig) -> None:
    t = resolve("gtx970", jump="root@10.9.9.9:22,titan", identity_file="/keys/lab",
                config=config)
    assert [(h.hostname, h.user, h.port) for h in t.jumps] == [
        ("10.9.9.9", "root", 22), ("192.168.0.80", "alice", 2200)]
    assert all(h.key_filenames[0] == "/keys/lab" for h in t.jumps)


def test_proxycommand_is_kept_with_its_tokens_expanded(config: paramiko.SSHConfig) -> None:
    t = resolve("behind-command", config=config)
    assert t.proxy_command == "nc -X connect -x proxy:3128 behind-command 22"


def test_an_unknown_name_is_used_as_is(config: paramiko.SSHConfig) -> None:
    t = resolve("10.1.2.3", config=config)
    assert (t.hostname, t.port, t.user) == ("10.1.2.3", 22, "fallback")


def test_a_jump_loop_is_an_error_not_a_hang() -> None:
    looped = paramiko.SSHConfig.from_text("Host a\n ProxyJump b\nHost b\n ProxyJump a\n")
    with pytest.raises(RemoteError, match="longer than 8 hops"):
        resolve("a", config=looped)


def test_the_files_are_read_again_when_they_change(tmp_path: Path) -> None:
    path = tmp_path / "config"
    path.write_text("Host box\n HostName 10.0.0.5\n")
    assert resolve("box", config=user_ssh_config((str(path),))).hostname == "10.0.0.5"
    path.write_text("Host box\n HostName 10.0.0.66\n")
    assert resolve("box", config=user_ssh_config((str(path),))).hostname == "10.0.0.66"
    assert resolve("box", config=user_ssh_config((str(tmp_path / "missing"),))).hostname == "box"


def test_invoke_is_loaded_only_for_a_match_exec_block(tmp_path: Path) -> None:
    """paramiko would import invoke (~45 ms) at every start; tfctl loads it when a config has a
    `Match exec` block, which paramiko evaluates through it."""
    config = tmp_path / "config"
    config.write_text('Match exec "test -n x"\n  HostName 10.4.4.4\nHost *\n  User u\n')
    probe = f"""
import sys
from tfctl.remote.connect import ssh
from tfctl.remote.connect.sshconfig import resolve, user_ssh_config
before = "invoke" in sys.modules
target = resolve("box", config=user_ssh_config(({str(config)!r},)))
print(before, target.hostname, "invoke" in sys.modules)
"""
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          check=True)
    assert proc.stdout.split() == ["False", "10.4.4.4", "True"]
