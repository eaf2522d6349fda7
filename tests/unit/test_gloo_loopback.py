"""Gloo and a hostname that resolves to loopback (inventory/frameworks/gloo.py, the agent's
remote/agent/netroute.py): what a torch rank is handed, how its host finds the interface at
start, what `check` and `up` say of such a host, and the hint for the failure it causes."""

from __future__ import annotations

import socket
from typing import Any

import pytest

from tfctl.inventory import make_plan, parse_inventory
from tfctl.inventory.frameworks import gloo
from tfctl.remote.agent import netroute
from tfctl.remote.runs.failure import explain

TWO_HOSTS = """name: lab
hosts:
  - {name: h1, address: 10.0.0.1, gpus: 0}
  - {name: h2, address: 10.0.0.2, gpus: 0, cpu_workers: 2}
job:
  script: train.py
"""
GLOO_FAILURE = ("RuntimeError: Gloo connectFullMesh failed with [/__w/pytorch/pytorch/third_party/"
                "gloo/gloo/transport/tcp/pair.cc:152] timed out connecting: SO_ERROR: Connection "
                "refused, remote=[127.0.1.1]:8576")
"""What rank 0 of a torchrun-style script said on the testbed before tfctl set gloo's interface
(torch 2.13, hosts whose names resolve to 127.0.1.1)."""


def plan_of(text: str) -> Any:
    return make_plan(parse_inventory(text, "lab.yaml"))


def test_a_torch_rank_across_hosts_is_handed_its_interface_found_at_start() -> None:
    plan = plan_of(TWO_HOSTS + "  framework: torch\n")
    for t in plan.tasks:
        for name in ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME"):
            assert t.env[name] == "tfctl:interface-to:10.0.0.1,10.0.0.2", t.env
    assert gloo.shown(plan.tasks[0].env["GLOO_SOCKET_IFNAME"]) == \
        "<found on the host at start: its interface toward 10.0.0.1>"
    assert gloo.shown("eth1") == "eth1"


def test_the_inventory_s_interface_and_a_group_on_one_host_get_none() -> None:
    own = plan_of(TWO_HOSTS + "  framework: torch\n  task_env: {worker: "
                              "{GLOO_SOCKET_IFNAME: ens5}}\n")
    assert {t.env["GLOO_SOCKET_IFNAME"] for t in own.tasks} == {"ens5"}
    assert {t.env["NCCL_SOCKET_IFNAME"] for t in own.tasks} == \
        {"tfctl:interface-to:10.0.0.1,10.0.0.2"}
    one = plan_of(TWO_HOSTS.replace("  - {name: h2, address: 10.0.0.2, gpus: 0, "
                                    "cpu_workers: 2}\n", "") + "  framework: torch\n")
    assert all("GLOO_SOCKET_IFNAME" not in t.env for t in one.tasks)  # loopback serves it
    tf = plan_of(TWO_HOSTS + "  framework: jax\n")  # JAX reads no such variable
    assert all("GLOO_SOCKET_IFNAME" not in t.env for t in tf.tasks)


def test_the_slurm_script_leaves_the_value_found_at_start_out() -> None:
    from tfctl.remote.exporters.slurm import sbatch_script

    script = sbatch_script(plan_of(TWO_HOSTS + "  framework: torch\n"))
    assert "tfctl:interface-to" not in script


IP_ADDR = """\
1: lo    inet 127.0.0.1/8 scope host lo\\       valid_lft forever preferred_lft forever
1: lo    inet6 ::1/128 scope host \\       valid_lft forever preferred_lft forever
2: eth0    inet 10.77.1.11/24 brd 10.77.1.255 scope global eth0\\       valid_lft forever
2: eth0    inet 10.77.9.5/24 scope global secondary eth0\\       valid_lft forever
3: veth1@if2    inet6 fd00::2/64 scope global nodad \\       valid_lft forever
"""
IF_INET6 = """\
00000000000000000000000000000001 01 80 10 80       lo
fd000000000000000000000000000002 03 40 00 80    veth1
fe8000000000000014aa0dfffee503bb 05 40 20 80    tflb1
"""


@pytest.mark.parametrize(("address", "interface"), [
    ("10.77.1.11", "eth0"),
    ("10.77.9.5", "eth0"),  # a secondary address, which SIOCGIFADDR would not show
    ("fd00::2", "veth1"),
    ("fd00:0:0::2", "veth1"),  # the same address written otherwise
    ("127.0.0.1", "lo"),
    ("10.0.0.9", None),
])
def test_the_interface_holding_an_address(address: str, interface: str | None) -> None:
    assert netroute.interface_of(address, netroute.parse_ip_addr(IP_ADDR)) == interface
    if ":" in address:
        assert netroute.interface_of(address, netroute.parse_if_inet6(IF_INET6)) == interface


@pytest.mark.parametrize(("address", "loopback"), [
    ("127.0.1.1", True), ("127.0.0.1", True), ("::1", True), ("::ffff:127.0.1.1", True),
    ("10.0.0.1", False), ("fd00::1", False), ("128.0.0.1", False),
])
def test_loopback_addresses(address: str, loopback: bool) -> None:
    assert netroute.is_loopback(address) is loopback
    assert gloo.is_loopback(address) is loopback


def _own_address() -> str | None:
    """This machine's address toward the world (a UDP connect sends nothing), if not loopback."""
    found = netroute.source_address("192.0.2.200")
    return None if found is None or netroute.is_loopback(found) else found


def test_the_agent_finds_the_interface_toward_the_group_here() -> None:
    """On this machine, against its own interfaces: loopback is never the answer; the first
    target reached from a non-loopback address is."""
    own = _own_address()
    if own is None:
        pytest.skip("this machine has no route off loopback")
    wanted = netroute.interface_of(own, netroute.interface_addresses())
    assert wanted not in (None, "lo")
    env = {"GLOO_SOCKET_IFNAME": "tfctl:interface-to:127.0.0.1,192.0.2.200", "A": "b",
           "NCCL_SOCKET_IFNAME": "tfctl:interface-to:127.0.0.1,no-such-host.invalid"}
    said = netroute.resolve_found_at_start(env)
    assert env == {"GLOO_SOCKET_IFNAME": wanted, "A": "b"}
    assert said == [f"GLOO_SOCKET_IFNAME={wanted} (the interface that reaches 127.0.0.1, "
                    "192.0.2.200)", "NCCL_SOCKET_IFNAME left unset: no interface here reaches "
                    "127.0.0.1, no-such-host.invalid from a non-loopback address"]


def test_the_agent_and_the_plan_write_the_same_marker() -> None:
    assert netroute.FOUND_AT_START == gloo.FOUND_AT_START


def test_the_host_s_own_name_is_looked_up_as_gloo_does() -> None:
    name, addresses = netroute.hostname_addresses()
    assert name == socket.gethostname()
    try:
        expected = {str(i[4][0]) for i in socket.getaddrinfo(name, None)}
    except OSError:
        expected = set()
    assert set(addresses) == expected


def test_check_says_what_tfctl_does_for_a_loopback_hostname() -> None:
    probe = {"hostname": "titan", "hostname_addresses": ["127.0.1.1"]}
    [(level, text)] = gloo.judge_hostname(probe, "torch", 2)
    assert level == "info" and "titan resolves to 127.0.1.1 (loopback)" in text
    assert "each rank gets GLOO_SOCKET_IFNAME and NCCL_SOCKET_IFNAME" in text
    [(level, text)] = gloo.judge_hostname(probe, "jax", 2)
    assert level == "fail" and "titan resolves to 127.0.1.1 (loopback)" in text
    assert "map titan to the host's LAN address in its /etc/hosts" in text
    assert gloo.judge_hostname(probe, "jax", 1) == []  # one host: loopback serves it
    assert gloo.judge_hostname({"hostname": "titan", "hostname_addresses": ["10.0.0.1"]},
                               "jax", 2) == []


@pytest.mark.parametrize("framework", ["torch", "jax", None])
def test_a_gloo_connection_to_loopback_gets_the_cause(framework: str | None) -> None:
    hint = explain(["Traceback (most recent call last):", '  File "train.py", line 9',
                    GLOO_FAILURE], framework=framework).hint
    assert hint is not None and "maps its hostname to loopback in /etc/hosts" in hint, hint


def test_a_torch_job_s_own_hint_comes_before_tensorflow_s() -> None:
    """gloo's refused connection to a real address: PyTorch's hint (MASTER_ADDR, gloo's own
    ports), not TensorFlow's `are the ports open` first."""
    line = GLOO_FAILURE.replace("127.0.1.1", "10.0.0.2")
    torch_hint = explain([line], framework="torch").hint
    assert torch_hint is not None and torch_hint.startswith("a rank could not reach rank 0"), \
        torch_hint
    assert "are the ports open" in (explain([line], framework="tensorflow").hint or "")
