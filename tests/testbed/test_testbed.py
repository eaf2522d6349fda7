"""The lab itself: real sshd hosts that log in, reach each other, and break on demand."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.support.testbed import LabUnsupported, Testbed
from tfctl.inventory.load import load_inventory

pytestmark = pytest.mark.testbed
ROOT = Path(__file__).resolve().parents[2]
DETACHED_SLEEP = "setsid sleep 300 </dev/null >/dev/null 2>&1 & echo $!"  # as a task is started


def connect_outcome(address: str, port: int, timeout_s: float = 1.0) -> str:
    """'banner' (an SSH server answered), 'timeout', 'refused', or the error's name."""
    try:
        with socket.create_connection((address, port), timeout=timeout_s) as sock:
            return "banner" if sock.recv(64).startswith(b"SSH-2.0-") else "no banner"
    except TimeoutError:
        return "timeout"
    except ConnectionRefusedError:
        return "refused"
    except OSError as exc:
        return type(exc).__name__


def gone(pid: int, wait_s: float = 3.0) -> bool:
    """The process is dead: no /proc entry, or a zombie its new parent (init) has yet to reap."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except FileNotFoundError:
            return True
        if state == "Z":
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)


def netns_list() -> str:
    return subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout


def outcome_from(testbed: Testbed, host: str, target: str) -> str:
    """`connect_outcome` run inside `host`'s namespace, aimed at `target` port 22."""
    script = textwrap.dedent(
        f"""
        import socket
        try:
            with socket.create_connection(({testbed.address(target)!r}, 22), timeout=1.0) as s:
                print("banner" if s.recv(64).startswith(b"SSH-2.0-") else "no banner")
        except TimeoutError:
            print("timeout")
        except ConnectionRefusedError:
            print("refused")
        """
    )
    return testbed.run(host, [sys.executable, "-c", script]).stdout.strip()


def ssh(
    testbed: Testbed, host: str, command: str, timeout_s: int = 5
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        testbed.ssh_argv(host, command, connect_timeout_s=timeout_s),
        capture_output=True,
        text=True,
        timeout=30,
    )


def test_strict_ssh_login_on_every_host(testbed: Testbed) -> None:
    for host in testbed.hosts:
        done = ssh(testbed, host.name, 'hostname; echo "$PATH"; echo "$HOME"; id -un')
        assert done.returncode == 0, done.stderr
        name, path, home, user = done.stdout.split("\n")[:4]
        if testbed.isolated:
            assert name == host.name
        assert path.split(":")[0] == str(host.bin_dir)
        assert home == str(host.home)
        assert user == testbed.user


def test_known_hosts_lists_every_host_once(testbed: Testbed) -> None:
    lines = testbed.known_hosts.read_text().splitlines()
    assert len(lines) == len(testbed.hosts)
    for host, line in zip(testbed.hosts, lines, strict=True):
        where = host.address if host.port == 22 else f"[{host.address}]:{host.port}"
        assert line.split()[:2] == [where, "ssh-ed25519"]


def test_hosts_reach_each_other_and_see_their_own_sshd(testbed: Testbed) -> None:
    if not testbed.isolated:
        pytest.skip("loopback lab: hosts have no namespaces")
    assert outcome_from(testbed, "h1", "h2") == "banner"
    assert outcome_from(testbed, "h3", "h1") == "banner"
    listening = testbed.run("h1", "ss -Hltnp").stdout
    assert f"{testbed.address('h1')}:22" in listening and "sshd" in listening
    assert testbed.sshd_pid("h1") in testbed.pids_in("h1")
    assert testbed.sshd_pid("h2") not in testbed.pids_in("h1")
    assert testbed.run("h2", "getent hosts h3").stdout.split()[0] == testbed.address("h3")


def test_tool_put_on_a_host_path_is_found_there_only(testbed: Testbed) -> None:
    testbed.write_tool("h2", "lab-probe", '#!/bin/sh\necho "probe $1 on $(hostname)"\n')
    try:
        done = ssh(testbed, "h2", "lab-probe 7")
        assert done.returncode == 0, done.stderr
        assert done.stdout.startswith("probe 7 on ")
        assert ssh(testbed, "h1", "command -v lab-probe").returncode != 0
        assert testbed.run("h2", "lab-probe 8").stdout.startswith("probe 8 on ")
    finally:
        testbed.remove_from_path("h2", "lab-probe")
    assert ssh(testbed, "h2", "command -v lab-probe").returncode != 0


def test_cut_times_out_and_heal_restores(testbed: Testbed, testbed_hosts_healed: Testbed) -> None:
    if not testbed.isolated:
        with pytest.raises(LabUnsupported):
            testbed.cut("h2")
        return
    testbed.cut("h2")
    assert testbed.is_cut("h2")
    assert connect_outcome(testbed.address("h2"), 22) == "timeout"
    assert outcome_from(testbed, "h1", "h2") == "timeout"
    assert outcome_from(testbed, "h1", "h3") == "banner"  # only h2 is off the LAN
    done = ssh(testbed, "h2", "true", timeout_s=1)
    assert done.returncode == 255 and "timed out" in done.stderr
    testbed.heal("h2")
    assert not testbed.is_cut("h2")
    assert connect_outcome(testbed.address("h2"), 22) == "banner"


def test_stopped_sshd_refuses_and_restarts(testbed: Testbed, testbed_hosts_healed: Testbed) -> None:
    host = testbed.host("h3")
    testbed.stop_sshd("h3")
    assert not testbed.sshd_running("h3")
    assert connect_outcome(host.address, host.port) == "refused"
    testbed.start_sshd("h3")
    assert ssh(testbed, "h3", "true").returncode == 0


def test_regenerated_host_key_is_refused_by_strict_ssh(
    testbed: Testbed, testbed_hosts_healed: Testbed
) -> None:
    before = testbed.known_hosts.read_text()
    testbed.regenerate_host_key("h1")
    done = ssh(testbed, "h1", "true")
    assert done.returncode == 255
    assert "REMOTE HOST IDENTIFICATION HAS CHANGED" in done.stderr
    assert testbed.known_hosts.read_text() == before  # left stale on purpose
    assert ssh(testbed, "h2", "true").returncode == 0
    testbed.restore_host_key("h1")
    assert ssh(testbed, "h1", "true").returncode == 0


def test_kill_strays_spares_sshd(testbed: Testbed) -> None:
    if not testbed.isolated:
        pytest.skip("loopback lab: hosts have no namespaces")
    done = ssh(testbed, "h2", DETACHED_SLEEP)
    assert done.returncode == 0, done.stderr
    stray = int(done.stdout)
    assert stray in testbed.pids_in("h2")
    assert stray in testbed.kill_strays("h2")
    assert gone(stray)
    assert testbed.sshd_running("h2")


def test_inventory_is_what_tfctl_loads(testbed: Testbed, tmp_path: Path) -> None:
    job = {"script": "train.py", "args": ["--epochs", "1"]}
    path = testbed.write_inventory(
        tmp_path / "cluster.yaml", job, gpus={"h1": 2, "h2": [1]}, ps={"h3": 0}, env={"A": "1"}
    )
    inventory = load_inventory(path)
    assert [h.name for h in inventory.hosts] == testbed.names
    for loaded, host in zip(inventory.hosts, testbed.hosts, strict=True):
        assert (loaded.address, loaded.port) == (host.address, host.port)
        assert loaded.workdir == str(host.workdir)
        assert loaded.user == testbed.user
        assert loaded.identity_file == str(testbed.key)
        assert loaded.known_hosts == str(testbed.known_hosts)
        assert loaded.python == sys.executable
        assert dict(loaded.env) == {"A": "1"}
    assert [(h.gpus, h.ps) for h in inventory.hosts] == [((0, 1), 1), ((1,), 1), ((), 0)]
    assert inventory.job.script == "train.py"
    with pytest.raises(KeyError):
        testbed.inventory_dict(job, gpus={"h9": 1})


def test_sixteen_hosts_come_up_and_close_leaves_nothing() -> None:
    with Testbed(16) as big:
        assert len(big.hosts) == 16 == len({h.address for h in big.hosts})
        for host in big.hosts:
            assert connect_outcome(host.address, host.port) == "banner"
        done = ssh(big, "h16", "hostname")
        assert done.returncode == 0, done.stderr
        if big.isolated:
            assert done.stdout.strip() == "h16"
            assert outcome_from(big, "h1", "h16") == "banner"
            stray = int(ssh(big, "h5", DETACHED_SLEEP).stdout)
        sshd_pids = [big.sshd_pid(h.name) for h in big.hosts]
        namespaces = [str(h.namespace) for h in big.hosts]
        k, lab_dir = big.k, big.dir
    assert not lab_dir.exists()
    for pid in sshd_pids:
        assert pid is not None and gone(pid)
    if big.isolated:
        assert gone(stray)
        netns_left = netns_list()
        assert not any(ns in netns_left for ns in namespaces)
        links = os.listdir("/sys/class/net")
        assert f"tflb{k}" not in links and not [n for n in links if n.startswith(f"tflv{k}h")]
        assert not any(Path("/etc/netns", str(ns)).exists() for ns in namespaces)


def test_lab_of_a_crashed_run_is_cleaned_by_the_next(testbed: Testbed) -> None:
    if not testbed.isolated:
        pytest.skip("stale-lab cleanup is for namespaces and bridges")
    crash = textwrap.dedent(
        """
        import os
        from tests.support.testbed import Testbed
        bed = Testbed(["c1"])
        print(bed.dir, bed.host("c1").namespace, bed.k, bed.sshd_pid("c1"), flush=True)
        os._exit(9)  # no close(): namespace, bridge, sshd and dir stay behind
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", crash], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    lab_dir, namespace, k, sshd = done.stdout.split()
    assert Path(lab_dir).exists() and Path(f"/proc/{sshd}").exists()
    with Testbed(1):
        pass  # starting a lab removes what dead owners left
    assert not Path(lab_dir).exists()
    assert namespace not in netns_list()
    assert f"tflb{k}" not in os.listdir("/sys/class/net")
    assert gone(int(sshd))
    # ...while the live session lab was left alone:
    assert ssh(testbed, "h1", "true").returncode == 0


def test_loopback_fallback_logs_in_but_cannot_cut(tmp_path: Path) -> None:
    with Testbed(2, isolated=False, lab_dir=tmp_path / "loop") as loop:
        assert not loop.isolated
        assert {h.address for h in loop.hosts} == {"127.0.0.1"}
        assert len({h.port for h in loop.hosts}) == 2
        for host in loop.hosts:
            done = ssh(loop, host.name, "echo $HOME")
            assert done.returncode == 0, done.stderr
            assert done.stdout.strip() == str(host.home)
        with pytest.raises(LabUnsupported):
            loop.cut("h1")
        sshd = loop.sshd_pid("h1")
        inventory = loop.inventory_dict({"script": "x.py"})
        assert [h["port"] for h in inventory["hosts"]] == [h.port for h in loop.hosts]
    assert sshd is not None and gone(sshd)
    assert not (tmp_path / "loop").exists()
