"""`tfctl check` against real sshd hosts: pass, a dead/cut host named in time, host keys."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from tests.support.testbedtools import aliased_jump_inventory, job_dir, tfctl

pytestmark = pytest.mark.testbed

JOB = {"script": "job.py", "style": "flags"}


@pytest.fixture
def inventory(testbed, tmp_path: Path) -> Path:  # type: ignore[no-untyped-def]
    return testbed.write_inventory(job_dir(tmp_path) / "cluster.yaml", JOB)


def test_check_passes_on_three_hosts(inventory: Path) -> None:
    proc = tfctl(inventory, "check", "-v")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for name in ("h1", "h2", "h3"):
        assert f"{name}: ok" in proc.stdout
        assert f"{name}: TensorFlow 2." in proc.stdout
        # TensorFlow's own answer, asked on the host (a child process importing it)
        assert f"{name}: TensorFlow 2." in proc.stdout and "(tensorflow-cpu) sees 0 GPU(s)" in \
            proc.stdout
    assert "reaches 4 task ports on its peers" in proc.stdout  # 2 peers × (ps + worker)
    assert "all 3 hosts ready" in proc.stdout
    # `style: flags` with a ps on each host, written before `strategy:` existed: the sharded
    # checkpoint trap is said here as `plan` says it.
    assert "parameter servers on 3 host(s) (h1, h2, h3)" in proc.stdout


def test_stopped_sshd_is_named_and_fails(testbed, inventory: Path, healed) -> None:  # type: ignore[no-untyped-def]
    testbed.stop_sshd("h2")
    proc = tfctl(inventory, "--connect-timeout", "3", "check", timeout=60)
    assert proc.returncode == 1
    assert "h2: FAILED" in proc.stdout and "refused the connection" in proc.stdout
    assert "h1: ok" in proc.stdout and "h3: ok" in proc.stdout
    assert "Traceback" not in proc.stdout + proc.stderr


def test_cut_host_is_named_within_the_connect_timeout(testbed, inventory: Path, healed) -> None:  # type: ignore[no-untyped-def]
    if not testbed.isolated:
        pytest.skip("cutting a host needs the network-namespace lab")
    testbed.cut("h3")
    # The subprocess timeout bounds the whole command: connect timeout 3 s plus the other hosts'
    # checks; a hang on the dead host would exceed it.
    proc = tfctl(inventory, "--connect-timeout", "3", "check", timeout=45)
    assert proc.returncode == 1
    assert "h3: FAILED" in proc.stdout and "no answer within 3 s" in proc.stdout
    assert "h1: ok" in proc.stdout


def test_unknown_host_key_refused_unless_accepted(testbed, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    known = tmp_path / "known_hosts"
    known.write_text("")
    inv = testbed.write_inventory(job_dir(tmp_path) / "cluster.yaml", JOB, hosts=["h1"],
                              known_hosts=str(known))
    proc = tfctl(inv, "check")
    assert proc.returncode == 1
    assert "is not in" in proc.stdout and "refused" in proc.stdout
    assert known.read_text() == ""
    proc = tfctl(inv, "--accept-new-host-keys", "check")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert testbed.host("h1").address in known.read_text()
    assert tfctl(inv, "check").returncode == 0  # recorded: now known


def test_changed_host_key_always_refused(testbed, tmp_path: Path, healed) -> None:  # type: ignore[no-untyped-def]
    known = tmp_path / "known_hosts"
    shutil.copy(testbed.known_hosts, known)
    inv = testbed.write_inventory(job_dir(tmp_path) / "cluster.yaml", JOB, hosts=["h2"],
                              known_hosts=str(known))
    testbed.regenerate_host_key("h2")
    for extra in ([], ["--accept-new-host-keys"]):
        proc = tfctl(inv, *extra, "check")
        assert proc.returncode == 1
        assert "has CHANGED" in proc.stdout and "SHA256:" in proc.stdout
        assert "ssh-keygen -R" in proc.stdout


def test_hosts_reached_through_the_users_ssh_config(testbed, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """Aliases of ~/.ssh/config give address, user, port and key; ProxyJump is followed."""
    inv, home = aliased_jump_inventory(testbed, tmp_path, JOB)
    h1 = testbed.host("h1")
    proc = tfctl(inv, "exec", "--", "sh", "-c", 'echo "from ${SSH_CONNECTION%% *}"',
                 env={"HOME": str(home)})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    outputs = {host: line for host, line in re.findall(r"(h[12]).*?\n.*?(from \S+)", proc.stdout)}
    assert set(outputs) == {"h1", "h2"}, proc.stdout
    if testbed.isolated:  # h2 sees the connection come from h1, the jump host; h1 from us
        assert outputs["h2"] == f"from {h1.address}", proc.stdout
        assert outputs["h1"] == f"from {testbed.gateway}", proc.stdout
