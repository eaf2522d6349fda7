"""Firewall rules for TensorFlow's task ports that admit only the inventory's hosts.

TensorFlow's gRPC servers (ps, worker, chief) listen on every interface whatever address the
cluster spec names, and accept anyone, unauthenticated (docs/field-notes.md §2): on a shared
lab network any machine can connect to a job's parameter servers. tfctl cannot change that, but it
knows exactly which ports each host serves and which hosts are its peers, so it can write the rules
that admit those peers (and loopback) to those ports and refuse everyone else, for nftables and for
iptables/ip6tables. TensorBoard binds 127.0.0.1 only and needs no rule; the evaluator serves
nothing.

Pure: from a `Plan` to text. Nothing is contacted and nothing is applied — the lab's owner
applies the rules as root (`nft -f FILE`, or runs the iptables lines).
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable
from dataclasses import dataclass

from tfctl.inventory.frameworks import framework_of
from tfctl.inventory.plan import Plan

MULTIPORT_MAX = 15  # iptables' multiport takes at most 15 ports (a range counts as two)


@dataclass(frozen=True)
class HostRules:
    """The rules for one host: its task ports, the addresses admitted to them, both syntaxes."""

    host: str
    address: str
    ports: tuple[int, ...]
    peers: tuple[str, ...]
    nftables: str
    iptables: str


def task_ports(plan: Plan, host: str) -> tuple[int, ...]:
    """The ports `host` serves to the cluster (TensorFlow's gRPC ports: ps, worker, chief; the
    framework's `cluster_roles`), sorted; where a port is chosen at `up` (not written under
    `job.ports`), every port of `job.port_range` it may take."""
    roles = framework_of(plan.inventory.job).cluster_roles
    tasks = [t for t in plan.on_host(host) if t.type in roles and t.port is not None]
    ports = {t.port for t in tasks if t.port is not None}
    if any(t.port_chosen_at_up for t in tasks):
        low, high = plan.inventory.job.ports.free_range
        ports.update(range(low, high + 1))
    return tuple(sorted(ports))


def peer_addresses(plan: Plan) -> tuple[str, ...]:
    """Every address of the plan's hosts, in inventory order: all of them talk to each other."""
    seen: dict[str, None] = {}
    for name in plan.hosts_used:
        seen.setdefault(plan.address_of(name), None)  # as the cluster spec names it
    return tuple(seen)


def firewall_rules(plan: Plan) -> list[HostRules]:
    peers = peer_addresses(plan)
    table = _identifier(plan.inventory.name)
    out = []
    for name in plan.hosts_used:
        ports = task_ports(plan, name)
        if not ports:
            continue
        out.append(HostRules(name, plan.address_of(name), ports, peers,
                             nftables_rules(f"tfctl_{table}", ports, peers),
                             iptables_rules(f"TFCTL-{table.upper()}"[:28], ports, peers)))
    return out


def render(plan: Plan) -> str:
    """All hosts' rules, nftables then iptables, with how to apply and remove them."""
    rules = firewall_rules(plan)
    if not rules:
        return "# no TensorFlow task ports in this plan: nothing to protect\n"
    lines = [f"# TensorFlow task ports of {plan.inventory.name!r} admit only: "
             f"{', '.join(rules[0].peers)} (and loopback).",
             "# Apply on each host as root; names (not IPs) are resolved once, when loaded.", ""]
    for r in rules:
        lines += [f"# ── {r.host} ({r.address}): ports {_port_list(r.ports, ', ')} ──",
                  "# nftables: save as tfctl.nft, then `nft -f tfctl.nft`",
                  r.nftables, "# or iptables / ip6tables:", r.iptables, ""]
    return "\n".join(lines)


def nftables_rules(table: str, ports: Iterable[int], peers: Iterable[str]) -> str:
    port_set = "{ " + _port_list(ports, ", ", "-") + " }"
    v4, v6, names = _split(peers)
    body = [f"\t\ttcp dport {port_set} iifname \"lo\" accept"]
    if v4 or names:
        body.append(f"\t\ttcp dport {port_set} ip saddr {{ {', '.join(v4 + names)} }} accept")
    if v6:
        body.append(f"\t\ttcp dport {port_set} ip6 saddr {{ {', '.join(v6)} }} accept")
    body.append(f"\t\ttcp dport {port_set} reject with tcp reset")
    return "\n".join([
        f"# remove: nft delete table inet {table}",
        f"table inet {table} {{",
        "\tchain tf_task_ports {",
        "\t\ttype filter hook input priority filter - 1; policy accept;",
        *body,
        "\t}",
        "}",
    ])


def iptables_rules(chain: str, ports: Iterable[int], peers: Iterable[str]) -> str:
    v4, v6, names = _split(peers)
    out: list[str] = []
    for tool, admitted in (("iptables", v4 + names), ("ip6tables", v6)):
        out += [f"{tool} -N {chain}", f"{tool} -A {chain} -i lo -j ACCEPT"]
        out += [f"{tool} -A {chain} -s {addr} -j ACCEPT" for addr in admitted]
        out.append(f"{tool} -A {chain} -p tcp -j REJECT --reject-with tcp-reset")
        out += [f"{tool} -I INPUT -p tcp -m multiport --dports {group} -j {chain}"
                for group in _multiport_groups(ports)]
    removal = "; ".join(
        f"{tool} -D INPUT -p tcp -m multiport --dports {group} -j {chain}"
        for tool in ("iptables", "ip6tables") for group in _multiport_groups(ports))
    for tool in ("iptables", "ip6tables"):
        removal += f"; {tool} -F {chain}; {tool} -X {chain}"
    return "\n".join([f"# remove: {removal}", *out])


def _split(peers: Iterable[str]) -> tuple[list[str], list[str], list[str]]:
    """(IPv4 literals, IPv6 literals, names) — names are left to the firewall to resolve."""
    v4: list[str] = []
    v6: list[str] = []
    names: list[str] = []
    for peer in peers:
        try:
            ip = ipaddress.ip_address(peer.strip("[]"))
        except ValueError:
            names.append(peer)
            continue
        (v4 if ip.version == 4 else v6).append(str(ip))
    return v4, v6, names


def _runs(ports: Iterable[int]) -> list[tuple[int, int]]:
    runs: list[tuple[int, int]] = []
    for port in sorted(set(ports)):
        if runs and port == runs[-1][1] + 1:
            runs[-1] = (runs[-1][0], port)
        else:
            runs.append((port, port))
    return runs


def _port_list(ports: Iterable[int], sep: str, dash: str = "-") -> str:
    return sep.join(str(a) if a == b else f"{a}{dash}{b}" for a, b in _runs(ports))


def _multiport_groups(ports: Iterable[int]) -> list[str]:
    """Comma lists for `--dports`, each within multiport's 15-port limit (a range counts 2)."""
    groups: list[list[str]] = [[]]
    used = 0
    for a, b in _runs(ports):
        cost = 1 if a == b else 2
        if used + cost > MULTIPORT_MAX:
            groups.append([])
            used = 0
        groups[-1].append(str(a) if a == b else f"{a}:{b}")
        used += cost
    return [",".join(g) for g in groups if g]


def _identifier(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_]", "_", name)
