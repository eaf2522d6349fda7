"""How an inventory host becomes an SSH endpoint over the user's OpenSSH config (sshconfig.py).

The testbed test `test_check.py::test_hosts_reached_through_the_users_ssh_config` connects
through such a config for real; these pin the precedence rules on parsed config text.
"""

from __future__ import annotations

import shutil
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
    """paramiko's parser (the fallback without an `ssh` client) evaluates a `Match exec`
    block through invoke, which `_paramiko` holds off while paramiko loads: it is loaded for
    such a block. (A connection imports it anyway, with Fabric: connection.py.)"""
    config = tmp_path / "config"
    config.write_text('Match exec "test -n x"\n  HostName 10.4.4.4\nHost *\n  User u\n')
    probe = f"""
import sys
from tfctl.remote.connect.sshconfig import resolve, user_ssh_config
before = "invoke" in sys.modules
target = resolve("box", config=user_ssh_config(({str(config)!r},)))
print(before, target.hostname, "invoke" in sys.modules)
"""
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          check=True)
    assert proc.stdout.split() == ["False", "10.4.4.4", "True"]


# ---------------------------------------------------------------- OpenSSH's own answer (ssh -G)

needs_ssh = pytest.mark.skipif(shutil.which("ssh") is None, reason="needs the ssh client")


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A HOME with its own ~/.ssh/config (passed to `ssh -G -F`, as HOME is not the account's)."""
    (tmp_path / ".ssh").mkdir()
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("TFCTL_SSH_G", raising=False)
    return tmp_path


@needs_ssh
def test_openssh_resolves_include_match_and_the_known_hosts_files(home: Path) -> None:
    (home / ".ssh" / "extra.conf").write_text(
        "Host titan\n  HostName 192.168.0.80\n  Port 2200\n  IdentityFile ~/.ssh/id_titan\n"
        "  IdentitiesOnly yes\n  HostKeyAlias titan-key\n"
        f"  UserKnownHostsFile {home}/lab_known\n  GlobalKnownHostsFile /srv/ssh_known_hosts\n")
    (home / ".ssh" / "id_titan").write_text("not read here")
    (home / ".ssh" / "config").write_text(
        f"Include {home}/.ssh/extra.conf\nMatch user carol\n  Port 2300\nHost *\n  User fallback\n")
    t = resolve("titan")
    assert (t.hostname, t.port, t.user) == ("192.168.0.80", 2200, "fallback")
    assert t.key_filenames == (str(home / ".ssh" / "id_titan"),)
    assert not t.look_for_keys and not t.allow_agent  # IdentitiesOnly
    assert t.host_key_alias == "titan-key"
    assert t.known_hosts_files == (str(home / "lab_known"), "/srv/ssh_known_hosts")
    # The inventory's values win (and OpenSSH's `Match user` sees the inventory's user).
    t = resolve("titan", user="carol", identity_file="/keys/lab")
    assert (t.user, t.port) == ("carol", 2200)  # Host titan's Port came first: first one wins
    assert t.key_filenames[0] == "/keys/lab"
    assert resolve("titan", port=22).port == 22


@needs_ssh
def test_an_alias_without_config_is_reached_as_before(home: Path) -> None:
    import getpass

    t = resolve("10.1.2.3")
    assert (t.hostname, t.port, t.user) == ("10.1.2.3", 22, getpass.getuser())
    assert t.key_filenames == () and t.look_for_keys and t.allow_agent
    assert t.jumps == () and t.proxy_command is None and t.host_key_alias is None


@needs_ssh
def test_openssh_jumps_and_proxy_command_tokens(home: Path) -> None:
    (home / ".ssh" / "config").write_text(
        "Host gtx*\n  ProxyJump alice@bastion:2022\nHost bastion\n  HostName 10.0.0.1\n"
        "Host behind\n  ProxyCommand nc -x proxy:3128 %h %p\n")
    (hop,) = resolve("gtx970").jumps
    assert (hop.hostname, hop.user, hop.port) == ("10.0.0.1", "alice", 2022)
    assert resolve("behind", port=2201).proxy_command == "nc -x proxy:3128 behind 2201"


@needs_ssh
def test_a_broken_config_is_one_sentence(home: Path) -> None:
    (home / ".ssh" / "config").write_text("Host x\n  NoSuchDirective yes\n")
    with pytest.raises(RemoteError, match="your ssh config cannot be read"):
        resolve("x")


def test_without_an_ssh_client_paramiko_reads_the_config(home: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    (home / ".ssh" / "config").write_text("Host box\n  HostName 10.0.0.5\n  HostKeyAlias k\n")
    monkeypatch.setenv("PATH", str(home))  # no `ssh` on it
    t = resolve("box")
    assert t.hostname == "10.0.0.5" and t.host_key_alias is None  # paramiko knows no alias
