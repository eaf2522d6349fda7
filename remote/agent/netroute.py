"""Which of the host's interfaces reaches a peer, and what the host's own name resolves to.

Part of the agent program (`__init__.py`): stdlib only, Python >= 3.8, Linux, no tfctl imports.

Gloo (PyTorch's CPU backend, and the CPU half of `cpu:gloo,cuda:nccl`) advertises the address
the machine's hostname resolves to unless told an interface (GLOO_SOCKET_IFNAME); a stock
Debian or Ubuntu install maps the hostname to 127.0.1.1 in /etc/hosts, so every rank
advertises loopback and the other hosts cannot connect (pytorch/gloo#223,
pytorch/pytorch#15592). The plan hands such a rank `GLOO_SOCKET_IFNAME` (and
`NCCL_SOCKET_IFNAME`) as a value to be found here at start (`FOUND_AT_START`,
`inventory/frameworks/gloo.py`): the interface whose address the kernel picks as the source
toward the group's hosts, rank 0's first (gloo takes one concrete interface name, never an
address or NCCL's `^lo` exclusions: aws-samples/aws-do-eks#51, #69).

How: a UDP socket `connect()`ed to the peer sends nothing but makes the kernel choose the route
and the source address (`getsockname()`); the interface holding that address comes from
`ip -o addr` where `ip` exists (every address, secondary ones included), else from
SIOCGIFADDR on each of `socket.if_nameindex()` (IPv4's primary address) and
/proc/net/if_inet6 (IPv6). Each function imports what it uses: an agent start that needs
none of this pays nothing.
"""

from __future__ import annotations

from collections.abc import Sequence

FOUND_AT_START = "tfctl:interface-to:"
"""A task env value `tfctl:interface-to:ADDR[,ADDR...]`: replaced at the task's start by the
name of the interface that reaches the first of the addresses it can reach from a
non-loopback address; the variable is left unset where none can be found. Written by the
client (inventory/frameworks/gloo.py, which holds the same text)."""

SIOCGIFADDR = 0x8915


def resolve_found_at_start(env: dict[str, str]) -> list[str]:
    """Replace each value of `env` written as `FOUND_AT_START...` by what it names on this
    host, or remove the variable where nothing is found; the lines to log (what was set)."""
    said = []
    for key, value in list(env.items()):
        if not value.startswith(FOUND_AT_START):
            continue
        targets = [t for t in value[len(FOUND_AT_START):].split(",") if t]
        name = interface_toward(targets)
        if name is None:
            del env[key]
            said.append(f"{key} left unset: no interface here reaches "
                        f"{', '.join(targets)} from a non-loopback address")
        else:
            env[key] = name
            said.append(f"{key}={name} (the interface that reaches {', '.join(targets)})")
    return said


def interface_toward(targets: Sequence[str]) -> str | None:
    """The interface whose address is the source toward the first of `targets` reached from a
    non-loopback address (None: none)."""
    table: list[tuple[str, str]] | None = None
    for target in targets:
        source = source_address(target)
        if source is None or is_loopback(source):
            continue
        if table is None:
            table = interface_addresses()
        name = interface_of(source, table)
        if name is not None:
            return name
    return None


def source_address(target: str) -> str | None:
    """The address this host sends from toward `target` (a name or an address), or None."""
    import socket

    try:
        infos = socket.getaddrinfo(target, 9, 0, socket.SOCK_DGRAM)
    except (OSError, UnicodeError):
        return None
    for family, kind, proto, _name, address in infos:
        sock = socket.socket(family, kind, proto)
        try:
            sock.connect(address)  # UDP: no packet leaves; the kernel picks route and source
            return str(sock.getsockname()[0])
        except OSError:
            continue
        finally:
            sock.close()
    return None


def is_loopback(address: str) -> bool:
    return address.startswith("127.") or address in ("::1", "0:0:0:0:0:0:0:1") \
        or address.startswith("::ffff:127.")


def interface_of(address: str, table: Sequence[tuple[str, str]]) -> str | None:
    """The interface of `table` ((name, address) pairs) that holds `address`."""
    wanted = _normal(address)
    return next((name for name, held in table if _normal(held) == wanted), None)


def _normal(address: str) -> str:
    import socket

    address = address.split("%", 1)[0]  # fe80::1%eth0
    if ":" not in address:
        return address
    try:
        return socket.inet_ntop(socket.AF_INET6, socket.inet_pton(socket.AF_INET6, address))
    except (OSError, ValueError):
        return address


def interface_addresses() -> list[tuple[str, str]]:
    """(interface, address) for every address of this host: `ip -o addr`'s, else the kernel's
    through SIOCGIFADDR and /proc/net/if_inet6."""
    import subprocess

    try:
        listed = subprocess.run(["ip", "-o", "addr", "show"], capture_output=True, text=True,
                                timeout=10, check=False)
        if listed.returncode == 0:
            found = parse_ip_addr(listed.stdout)
            if found:
                return found
    except (OSError, subprocess.SubprocessError):
        pass
    found = _ipv4_by_ioctl()
    try:
        with open("/proc/net/if_inet6") as table:
            found += parse_if_inet6(table.read())
    except OSError:
        pass
    return found


def parse_ip_addr(text: str) -> list[tuple[str, str]]:
    """(interface, address) of each line of `ip -o addr show`:
    `2: eth0    inet 10.0.0.5/24 brd 10.0.0.255 scope global eth0\\ ...`."""
    found = []
    for line in text.splitlines():
        words = line.split()
        if len(words) >= 4 and words[2] in ("inet", "inet6"):
            found.append((words[1].split("@", 1)[0], words[3].split("/", 1)[0]))
    return found


def parse_if_inet6(text: str) -> list[tuple[str, str]]:
    """(interface, address) of each line of /proc/net/if_inet6 (32 hex digits, index,
    prefix length, scope, flags, name)."""
    found = []
    for line in text.splitlines():
        words = line.split()
        if len(words) == 6 and len(words[0]) == 32:
            hexes = words[0]
            found.append((words[5], _normal(":".join(hexes[i:i + 4] for i in range(0, 32, 4)))))
    return found


def _ipv4_by_ioctl() -> list[tuple[str, str]]:
    import fcntl
    import socket
    import struct

    found = []
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        for _index, name in socket.if_nameindex():
            try:
                answer = fcntl.ioctl(sock.fileno(), SIOCGIFADDR,
                                     struct.pack("256s", name.encode()[:15]))
            except OSError:
                continue  # no IPv4 address on it
            found.append((name, socket.inet_ntoa(answer[20:24])))
    finally:
        sock.close()
    return found


def hostname_addresses() -> tuple[str, list[str]]:
    """The host's name (gethostname) and the addresses it resolves to here, as a program that
    looks itself up (gloo) finds them: /etc/hosts first, as the resolver's order says."""
    import socket

    name = socket.gethostname()
    try:
        infos = socket.getaddrinfo(name, None, 0, socket.SOCK_STREAM)
    except (OSError, UnicodeError):
        return name, []
    return name, list(dict.fromkeys(str(info[4][0]) for info in infos))

