"""OpenSSH resolves the hosts, on real sshd hosts: an alias behind an
`Include`, a host key only in a GlobalKnownHostsFile, a HostKeyAlias, `@revoked`, and host
certificates under `@cert-authority`. paramiko's own config parser and known_hosts reader
handle none of these; tfctl asks `ssh -G` and reads the files as OpenSSH does.

The user's config is a temporary HOME's ~/.ssh/config (as in test_check.py); OpenSSH
expands `~` from the account, not $HOME, so the Include line names its folder in full.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from tests.support.testbed.layout import free_port
from tests.support.testbed.sshd import SshdProcess, public_key_line, write_config
from tests.support.testbedtools import job_dir, tfctl

pytestmark = [pytest.mark.testbed,
              pytest.mark.skipif(shutil.which("ssh") is None, reason="needs the ssh client")]

JOB = {"script": "job.py", "style": "flags"}


def alias_inventory(testbed, tmp_path: Path, alias: str, known: Path) -> Path:  # type: ignore[no-untyped-def]
    """h1 reached as `alias` (no user, port or key in the inventory: all from the config)."""
    data = testbed.inventory_dict(JOB, hosts=["h1"], known_hosts=str(known))
    data["hosts"][0]["address"] = alias
    data["hosts"][0].pop("port", None)
    for key in ("user", "port", "identity_file"):
        data["defaults"].pop(key)
    inv = job_dir(tmp_path) / "cluster.yaml"
    inv.write_text(yaml.safe_dump(data))
    return inv


def home_with(tmp_path: Path, config: str) -> dict[str, str]:
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True, exist_ok=True)
    (home / ".ssh" / "config").write_text(config)
    return {"HOME": str(home), "XDG_CACHE_HOME": str(tmp_path / "cache")}


def box(testbed, alias: str = "box1", extra: str = "") -> str:  # type: ignore[no-untyped-def]
    h1 = testbed.host("h1")
    return (f"Host {alias}\n  HostName {h1.address}\n  Port {h1.port}\n  User {testbed.user}\n"
            f"  IdentityFile {testbed.key}\n  IdentitiesOnly yes\n{extra}")


def reach(inv: Path, env: dict[str, str], *extra: str) -> subprocess.CompletedProcess[str]:
    return tfctl(inv, *extra, "ssh", "h1", "--", "echo", "reached", env=env, timeout=60)


def empty(tmp_path: Path, name: str = "known_hosts") -> Path:
    path = tmp_path / name
    path.write_text("")
    return path


def test_an_alias_defined_only_in_an_included_file(testbed, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    env = home_with(tmp_path, f"Include {tmp_path}/home/.ssh/config.d/*.conf\n")
    (tmp_path / "home" / ".ssh" / "config.d").mkdir()
    (tmp_path / "home" / ".ssh" / "config.d" / "lab.conf").write_text(box(testbed))
    inv = alias_inventory(testbed, tmp_path, "box1", testbed.known_hosts)
    proc = reach(inv, env)
    assert (proc.returncode, proc.stdout) == (0, "reached\n"), proc.stderr
    # The answer is cached by the files' stamps: a changed included file is read again.
    (tmp_path / "home" / ".ssh" / "config.d" / "lab.conf").write_text(
        box(testbed).replace(f"Port {testbed.host('h1').port}", f"Port {free_port()}"))
    proc = reach(inv, env, "--connect-timeout", "2")
    assert proc.returncode == 1 and "refused the connection" in proc.stderr


def test_a_host_key_only_in_the_global_known_hosts_file(testbed, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    global_file = tmp_path / "ssh_known_hosts"
    shutil.copy(testbed.known_hosts, global_file)
    env = home_with(tmp_path, box(testbed, extra=f"  GlobalKnownHostsFile {global_file}\n"))
    inv = alias_inventory(testbed, tmp_path, "box1", empty(tmp_path))
    proc = reach(inv, env)
    assert (proc.returncode, proc.stdout) == (0, "reached\n"), proc.stderr
    assert (tmp_path / "known_hosts").read_text() == ""  # nothing recorded: it was known
    global_file.write_text("")
    proc = reach(inv, env)
    assert proc.returncode == 1 and "is not in" in proc.stderr and "refused" in proc.stderr


def test_a_host_key_alias_is_the_name_looked_up(testbed, tmp_path: Path, healed) -> None:  # type: ignore[no-untyped-def]
    known = tmp_path / "known_hosts"
    known.write_text(f"labbox-one {public_key_line(testbed.host('h1').host_key)}\n")
    env = home_with(tmp_path, box(testbed, extra="  HostKeyAlias labbox-one\n"))
    inv = alias_inventory(testbed, tmp_path, "box1", known)
    proc = reach(inv, env)
    assert (proc.returncode, proc.stdout) == (0, "reached\n"), proc.stderr
    testbed.regenerate_host_key("h1")  # a changed key under the alias: refused, opted in or not
    proc = reach(inv, env, "--accept-new-host-keys")
    assert proc.returncode == 1 and "has CHANGED" in proc.stderr and "labbox-one" in proc.stderr


def test_a_new_key_is_recorded_under_the_alias(testbed, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    env = home_with(tmp_path, box(testbed, extra="  HostKeyAlias labbox-two\n"))
    inv = alias_inventory(testbed, tmp_path, "box1", empty(tmp_path))
    assert reach(inv, env).returncode == 1
    assert reach(inv, env, "--accept-new-host-keys").returncode == 0
    assert (tmp_path / "known_hosts").read_text().startswith("labbox-two ssh-ed25519 ")
    assert reach(inv, env).returncode == 0


def test_a_revoked_key_is_refused_though_known(testbed, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    global_file = tmp_path / "ssh_known_hosts"
    global_file.write_text(f"@revoked * {public_key_line(testbed.host('h1').host_key)}\n")
    env = home_with(tmp_path, box(testbed, extra=f"  GlobalKnownHostsFile {global_file}\n"))
    inv = alias_inventory(testbed, tmp_path, "box1", testbed.known_hosts)
    proc = reach(inv, env, "--accept-new-host-keys")
    assert proc.returncode == 1 and "@revoked" in proc.stderr and "reached" not in proc.stdout


# ---------------------------------------------------------------- host certificates


def keygen(*args: str) -> None:
    subprocess.run(["ssh-keygen", "-q", *args], check=True, capture_output=True, timeout=30)


@pytest.fixture
def cert_host(testbed, tmp_path: Path):  # type: ignore[no-untyped-def]
    """An extra sshd on 127.0.0.1 whose host key comes with a certificate; yields a function
    that signs a new certificate (CA, principals) and restarts the sshd with it."""
    folder = tmp_path / "certhost"
    folder.mkdir()
    host_key = folder / "host_key"
    keygen("-t", "ed25519", "-N", "", "-f", str(host_key))
    port = free_port()
    config = folder / "sshd_config"
    write_config(config, listen="127.0.0.1", port=port, host_key=host_key,
                 authorized_keys=testbed.authorized_keys, pid_file=folder / "sshd.pid",
                 path_dirs=[], home=folder, as_root=testbed.user == "root")
    base = config.read_text()
    sshd = SshdProcess([], config, folder / "sshd.log", "127.0.0.1", port)

    def sign(ca: Path, principals: str) -> None:
        keygen("-s", str(ca), "-I", "certhost", "-h", "-n", principals, "-V", "-5m:+1h",
               str(host_key) + ".pub")
        config.write_text(base + f"HostCertificate {host_key}-cert.pub\n")
        sshd.stop()
        sshd.start()
        sshd.wait_ready(time.monotonic() + 30)

    sign.port = port  # type: ignore[attr-defined]
    try:
        yield sign
    finally:
        sshd.stop()


def cert_inventory(testbed, tmp_path: Path, port: int) -> tuple[Path, dict[str, str]]:  # type: ignore[no-untyped-def]
    env = home_with(tmp_path, f"Host certbox\n  HostName 127.0.0.1\n  Port {port}\n"
                              f"  User {testbed.user}\n  IdentityFile {testbed.key}\n")
    return alias_inventory(testbed, tmp_path, "certbox", tmp_path / "known_hosts"), env


def test_a_host_certificate_signed_by_a_listed_ca_is_accepted(testbed, tmp_path: Path,  # type: ignore[no-untyped-def]
                                                             cert_host) -> None:
    ca, other_ca = tmp_path / "ca", tmp_path / "other_ca"
    keygen("-t", "ed25519", "-N", "", "-f", str(ca))
    keygen("-t", "ed25519", "-N", "", "-f", str(other_ca))
    (tmp_path / "known_hosts").write_text(
        f"@cert-authority [127.0.0.1]:* {public_key_line(ca)}\n")
    inv, env = cert_inventory(testbed, tmp_path, cert_host.port)

    cert_host(ca, "127.0.0.1")
    proc = reach(inv, env)
    assert (proc.returncode, proc.stdout) == (0, "reached\n"), proc.stderr
    assert "@cert-authority" in (tmp_path / "known_hosts").read_text().splitlines()[-1]

    cert_host(ca, "some-other-host")  # the right CA, but not for this host
    proc = reach(inv, env, "--accept-new-host-keys")
    assert proc.returncode == 1 and "names some-other-host, not 127.0.0.1" in proc.stderr

    cert_host(other_ca, "127.0.0.1")  # a CA no line lists
    proc = reach(inv, env, "--accept-new-host-keys")
    assert proc.returncode == 1 and "is not a @cert-authority" in proc.stderr


# ---------------------------------------------------------------- Fabric, every hop checked


def jump_config(testbed, extra_jump: str = "") -> str:  # type: ignore[no-untyped-def]
    h1, h2 = testbed.host("h1"), testbed.host("h2")
    return (f"Host jump1\n  HostName {h1.address}\n  Port {h1.port}\n  User {testbed.user}\n"
            f"  IdentityFile {testbed.key}\n{extra_jump}"
            f"Host box2\n  HostName {h2.address}\n  Port {h2.port}\n  User {testbed.user}\n"
            f"  IdentityFile {testbed.key}\n  ProxyJump jump1\n")


def test_each_hop_is_a_fabric_connection_checked_by_tfctls_policy(testbed, tmp_path: Path,  # type: ignore[no-untyped-def]
                                                                  monkeypatch) -> None:
    import fabric

    from tfctl.inventory.load import load_inventory
    from tfctl.remote.connect.hostkeys import VerifyingPolicy
    from tfctl.remote.connect.ssh import SshTransport
    from tfctl.remote.errors import HostKeyRefused

    known = tmp_path / "known_hosts"
    h2_line = (
        f"[{testbed.address('h2')}]:{testbed.host('h2').port}"
        if testbed.host("h2").port != 22
        else testbed.address("h2")
    )
    known.write_text(f"{h2_line} {public_key_line(testbed.host('h2').host_key)}\n")  # h2 only
    for key, value in home_with(tmp_path, jump_config(testbed)).items():
        monkeypatch.setenv(key, value)
    data = testbed.inventory_dict(JOB, hosts=["h2"], known_hosts=str(known))
    data["hosts"][0]["address"] = "box2"
    data["hosts"][0].pop("port", None)
    for key in ("user", "port", "identity_file"):
        data["defaults"].pop(key)
    inv_path = tmp_path / "cluster.yaml"
    inv_path.write_text(yaml.safe_dump(data))
    host = load_inventory(str(inv_path)).host("h2")
    # The jump host's key is in no file: refused, though the destination's is known.
    with pytest.raises(HostKeyRefused, match=f"host key of .*{testbed.address('h1')}"):
        SshTransport(host).run("true")
    shutil.copy(testbed.known_hosts, known)
    transport = SshTransport(host)
    try:
        assert transport.run("echo $SSH_CONNECTION").stdout.strip()
        link = transport.connection()
        assert isinstance(link.connection, fabric.Connection)
        (hop,) = link.hops
        assert isinstance(hop, fabric.Connection) and link.connection.gateway is hop
        for conn in (hop, link.connection):  # Fabric's AutoAddPolicy replaced on every hop
            assert isinstance(conn.client._policy, VerifyingPolicy)
    finally:
        transport.close()


def test_a_changed_key_on_the_jump_host_is_refused(testbed, tmp_path: Path, healed) -> None:  # type: ignore[no-untyped-def]
    known = tmp_path / "known_hosts"
    shutil.copy(testbed.known_hosts, known)
    env = home_with(tmp_path, jump_config(testbed))
    data = testbed.inventory_dict(JOB, hosts=["h2"], known_hosts=str(known))
    data["hosts"][0]["address"] = "box2"
    data["hosts"][0].pop("port", None)
    for key in ("user", "port", "identity_file"):
        data["defaults"].pop(key)
    inv = job_dir(tmp_path) / "cluster.yaml"
    inv.write_text(yaml.safe_dump(data))
    assert tfctl(inv, "ssh", "h2", "--", "true", env=env).returncode == 0
    testbed.regenerate_host_key("h1")  # the jump host
    proc = tfctl(inv, "--accept-new-host-keys", "ssh", "h2", "--", "echo", "reached", env=env)
    assert proc.returncode == 1 and "has CHANGED" in proc.stderr, proc.stderr
    assert testbed.address("h1") in proc.stderr and "reached" not in proc.stdout


def test_a_user_certificate_named_by_certificatefile_logs_in(testbed, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """An sshd that takes only certificates signed by its user CA (no authorized key): the
    login works with the CertificateFile the ssh config names (kept apart from the key)."""
    folder = tmp_path / "certuser"
    folder.mkdir()
    host_key, user_ca = folder / "host_key", folder / "user_ca"
    keygen("-t", "ed25519", "-N", "", "-f", str(host_key))
    keygen("-t", "ed25519", "-N", "", "-f", str(user_ca))
    shutil.copy(str(testbed.key) + ".pub", folder / "me.pub")
    keygen(
        "-s", str(user_ca), "-I", "me", "-n", testbed.user, "-V", "-5m:+1h", str(folder / "me.pub")
    )
    (folder / "none").write_text("")
    port = free_port()
    config = folder / "sshd_config"
    write_config(config, listen="127.0.0.1", port=port, host_key=host_key,
                 authorized_keys=folder / "none", pid_file=folder / "sshd.pid", path_dirs=[],
                 home=folder, as_root=testbed.user == "root")
    config.write_text(config.read_text() + f"TrustedUserCAKeys {user_ca}.pub\n")
    sshd = SshdProcess([], config, folder / "sshd.log", "127.0.0.1", port)
    sshd.start()
    try:
        sshd.wait_ready(time.monotonic() + 30)
        known = tmp_path / "known_hosts"
        known.write_text(f"[127.0.0.1]:{port} {public_key_line(host_key)}\n")
        body = (f"Host certuser\n  HostName 127.0.0.1\n  Port {port}\n  User {testbed.user}\n"
                f"  IdentityFile {testbed.key}\n  IdentitiesOnly yes\n")
        env = home_with(tmp_path, body)
        inv = alias_inventory(testbed, tmp_path, "certuser", known)
        proc = reach(inv, env)
        assert proc.returncode == 1 and "refused the login" in proc.stderr  # no certificate
        env = home_with(tmp_path, body + f"  CertificateFile {folder}/me-cert.pub\n")
        proc = reach(inv, env)
        assert (proc.returncode, proc.stdout) == (0, "reached\n"), proc.stderr
    finally:
        sshd.stop()
