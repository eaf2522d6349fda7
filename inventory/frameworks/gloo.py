"""Gloo and a hostname that resolves to loopback: what PyTorch's ranks are handed, what `check`
and `up` say of such a host for a JAX job, and the hint for the failure it causes.

A stock Debian or Ubuntu install maps the machine's own hostname to `127.0.1.1` in /etc/hosts
(some images to `127.0.0.1`). Gloo's TCP transport, given no interface, binds and advertises
the address the hostname resolves to, so every rank advertises loopback and the ranks on other
hosts fail: `Gloo connectFullMesh failed ... Connection refused, remote=[127.0.0.1]:PORT`
(pytorch/gloo#223, pytorch/pytorch#15592; docs/loopback-hostnames.md).

- PyTorch reads GLOO_SOCKET_IFNAME (and NCCL, NCCL_SOCKET_IFNAME). A rank of a group across
  hosts is handed both, unless the inventory sets them, as a value found on its host at start
  (`FOUND_AT_START`, resolved by the agent, remote/agent/netroute.py): the interface that
  reaches rank 0's host (or, where that is this host, another host of the group).
- JAX builds its gloo collectives with no hostname or interface (jax-ml/jax, module
  `jax._src.xla_bridge`: `make_gloo_tcp_collectives(distributed_client=...)`; jaxlib has no
  variable for it), so a
  JAX job across hosts cannot be told: it is refused before anything starts where a host's
  name resolves to loopback (`loopback_refusal`), with the fix, the hostname mapped to the
  host's LAN address in /etc/hosts.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from tfctl.inventory.frameworks.interface import Hint, Level

FOUND_AT_START = "tfctl:interface-to:"
"""A task env value `tfctl:interface-to:ADDR[,ADDR...]`: the host's agent replaces it at the
task's start by the interface that reaches the first of the addresses it can reach from a
non-loopback address, or leaves the variable unset (remote/agent/netroute.py holds the same
text)."""

LOOPBACK_SENSITIVE = ("torch", "jax")
"""The frameworks whose collectives run over gloo, which a loopback hostname breaks."""

REFUSED_ON_LOOPBACK = ("jax",)
"""The frameworks whose gloo cannot be told its interface: a job across hosts is refused where a
host's name resolves to loopback."""

IFNAME_VARIABLES = ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME")
"""What PyTorch's gloo and NCCL read for the interface to use."""


def found_at_start(targets: Sequence[str]) -> str:
    """The env value that the host's agent replaces by the interface toward `targets`."""
    return FOUND_AT_START + ",".join(dict.fromkeys(targets))


def is_found_at_start(value: str) -> bool:
    return value.startswith(FOUND_AT_START)


def shown(value: str) -> str:
    """`value` as `tfctl plan` shows it: a value found at start says what finds it."""
    if not is_found_at_start(value):
        return value
    first = value[len(FOUND_AT_START):].split(",", 1)[0]
    return f"<found on the host at start: its interface toward {first}>"


def interface_defaults(coordinator: str, addresses: Sequence[str]) -> dict[str, str]:
    """GLOO_SOCKET_IFNAME and NCCL_SOCKET_IFNAME for a rank of a group on the hosts at
    `addresses` (rank 0's, `coordinator`, first): nothing for a group on one host (loopback
    serves it)."""
    targets = list(dict.fromkeys([coordinator, *addresses]))
    if len(targets) < 2:
        return {}
    return {name: found_at_start(targets) for name in IFNAME_VARIABLES}


def is_loopback(address: str) -> bool:
    return address.startswith("127.") or address == "::1" or address.startswith("::ffff:127.")


def loopback_of(probe: Mapping[str, Any]) -> list[str]:
    """The loopback addresses the host's name resolves to there (its probe's answer)."""
    return [a for a in probe.get("hostname_addresses") or () if is_loopback(a)]


def judge_hostname(probe: Mapping[str, Any], framework: str,
                   hosts: int) -> list[tuple[Level, str]]:
    """What `check` says of a host whose name resolves to loopback, for a job of `framework`
    (torch, jax) across `hosts` hosts: what tfctl does about it."""
    loopback = loopback_of(probe)
    if not loopback or hosts < 2:
        return []
    name = probe.get("hostname") or "its hostname"
    if framework == "torch":
        return [("info", f"its hostname {name} resolves to {', '.join(loopback)} (loopback), "
                         "which gloo would advertise to the other hosts: each rank gets "
                         "GLOO_SOCKET_IFNAME and NCCL_SOCKET_IFNAME, the interface toward rank "
                         "0's host found there at start, unless the inventory's env sets them")]
    return [("fail", loopback_refusal(probe.get("hostname") or "?", loopback))]


def loopback_refusal(hostname: str, loopback: Sequence[str]) -> str:
    """Why a JAX job across hosts cannot run on a host whose name resolves to loopback."""
    return (f"its hostname {hostname} resolves to {', '.join(loopback)} (loopback): JAX's gloo "
            "collectives (and Keras 3's `keras.distribution.initialize()`) advertise that "
            "address to the other hosts, which then cannot connect, and JAX has no setting "
            f"for the interface; map {hostname} to the host's LAN address in its /etc/hosts "
            f"(e.g. `192.168.1.20 {hostname}` in place of `{loopback[0]} {hostname}`)")


LOOPBACK_HINT = Hint(
    re.compile(r"connectFullMesh failed.*remote=\[(?:127\.\d+\.\d+\.\d+|::1)\]|"
               r"remote=\[(?:127\.\d+\.\d+\.\d+|::1)\]:\d+.*(?:Connection refused|timed out)",
               re.IGNORECASE),
    "a rank connected to a loopback address (127.x) another rank advertised: that rank's "
    "host maps its hostname to loopback in /etc/hosts (`127.0.1.1 <hostname>`, as Debian and "
    "Ubuntu write it), and gloo advertises what the hostname resolves to; `tfctl check` names "
    "the host. tfctl hands PyTorch's ranks GLOO_SOCKET_IFNAME unless the inventory's env sets "
    "it (is it set to `lo` there?); else map the hostname to the host's LAN address in "
    "/etc/hosts")
"""The failure a loopback hostname causes, first among PyTorch's and JAX's hints."""
