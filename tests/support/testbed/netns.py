"""Network plumbing for the root-mode lab: a bridge, one namespace + veth per host, cut/heal.

Every lab owns one bridge `tflb<k>` and the subnet 10.77.<k>.0/24; creating the bridge is the
atomic claim on `k`, so concurrent labs (two pytest runs) never share a subnet. The bridge's
alias records the owning process (pid + start time) and the lab dir, which is how a later run
recognises and removes what a crashed run left behind. Namespaces are `tfl<pid>x<k>h<i>`, root-side
veths `tflv<k>h<i>` (interface names are limited to 15 characters).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

PREFIX = "tfl"
SUBNET_BASE = "10.77"
HOST_OFFSET = 11
ALIAS_TAG = "tfctl-lab"
NETNS_ETC = Path("/etc/netns")

_NS_RE = re.compile(rf"^{PREFIX}(\d+)x(\d+)h(\d+)$")
_BRIDGE_RE = re.compile(rf"^{PREFIX}b(\d+)$")
_VETH_RE = re.compile(rf"^{PREFIX}v(\d+)h(\d+)$")
_ALIAS_RE = re.compile(rf"^{ALIAS_TAG} owner=(\d+):(\d+) dir=(.*)$")


class NetnsError(RuntimeError):
    """An `ip`/`iptables` command failed; the message has the command and its stderr."""


def ip(*args: str, stdin: str | None = None, check: bool = True) -> str:
    done = subprocess.run(
        ["ip", *args], input=stdin, capture_output=True, text=True, check=False, timeout=60
    )
    if check and done.returncode != 0:
        raise NetnsError(f"ip {' '.join(args)}: {done.stderr.strip()}")
    return done.stdout


def process_start_time(pid: int) -> int | None:
    """Field 22 of /proc/<pid>/stat; with the pid it names a process uniquely (pids get reused)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    return int(stat.rsplit(")", 1)[1].split()[19])


def owner_token() -> str:
    pid = os.getpid()
    return f"{pid}:{process_start_time(pid)}"


def _owner_alive(pid: int, start: int) -> bool:
    return process_start_time(pid) == start


@dataclass(frozen=True)
class HostNet:
    """Names and address of one host's namespace and link."""

    namespace: str
    veth: str
    address: str


def bridge_name(k: int) -> str:
    return f"{PREFIX}b{k}"


def host_nets(k: int, count: int) -> list[HostNet]:
    pid = os.getpid()
    return [
        HostNet(
            f"{PREFIX}{pid}x{k}h{i}", f"{PREFIX}v{k}h{i}", f"{SUBNET_BASE}.{k}.{HOST_OFFSET + i}"
        )
        for i in range(count)
    ]


def _bridge_aliases() -> dict[int, str | None]:
    """k -> alias (None when not set yet) of every lab bridge present."""
    found: dict[int, str | None] = {}
    for dev in Path("/sys/class/net").iterdir():
        match = _BRIDGE_RE.match(dev.name)
        if match:
            try:
                alias = (dev / "ifalias").read_text().strip()
            except FileNotFoundError:
                continue
            found[int(match.group(1))] = alias or None
    return found


def _bridge_owner(alias: str | None) -> tuple[int, int, str] | None:
    match = _ALIAS_RE.match(alias or "")
    if match is None:
        return None
    return int(match.group(1)), int(match.group(2)), match.group(3)


def pids_by_namespace(namespaces: list[str]) -> dict[str, list[int]]:
    """Processes in each named namespace, from one /proc scan (what `ip netns pids` does per ns)."""
    inodes: dict[int, str] = {}
    for name in namespaces:
        with contextlib.suppress(FileNotFoundError):
            inodes[os.stat(f"/run/netns/{name}").st_ino] = name
    found: dict[str, list[int]] = {name: [] for name in namespaces}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            inode = os.stat(f"/proc/{entry.name}/ns/net").st_ino
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue  # exited meanwhile, or a zombie
        if inode in inodes:
            found[inodes[inode]].append(int(entry.name))
    return found


def namespace_pids(namespace: str) -> list[int]:
    return pids_by_namespace([namespace])[namespace]


def kill_namespace_processes(namespaces: list[str]) -> None:
    """SIGKILL everything in the namespaces, again until nothing is left (children may fork)."""
    for _ in range(100):
        pids = [pid for found in pids_by_namespace(namespaces).values() for pid in found]
        if not pids:
            return
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.01)


def cleanup_stale() -> list[str]:
    """Remove namespaces, veths, bridges, /etc/netns dirs and lab dirs of dead lab owners."""
    removed: list[str] = []
    bridges = _bridge_aliases()
    live: dict[int, int] = {}  # k -> owner pid, for bridges whose owner still runs
    for k, alias in bridges.items():
        owner = _bridge_owner(alias)
        if owner is None:
            live[k] = -1  # alias not written yet: a lab being created right now
        elif _owner_alive(owner[0], owner[1]):
            live[k] = owner[0]
    for name in ip("netns", "list").split("\n"):
        name = name.split(" ")[0]
        match = _NS_RE.match(name)
        if match and live.get(int(match.group(2))) not in (int(match.group(1)), -1):
            kill_namespace_processes([name])
            ip("netns", "del", name, check=False)
            shutil.rmtree(NETNS_ETC / name, ignore_errors=True)
            removed.append(name)
    if NETNS_ETC.is_dir():
        for etc in NETNS_ETC.iterdir():
            match = _NS_RE.match(etc.name)
            if match and not Path("/run/netns", etc.name).exists():
                shutil.rmtree(etc, ignore_errors=True)
    for dev in Path("/sys/class/net").iterdir():
        match = _VETH_RE.match(dev.name)
        if match and int(match.group(1)) not in live:
            ip("link", "del", dev.name, check=False)
            removed.append(dev.name)
    for k, alias in bridges.items():
        if k in live:
            continue
        owner = _bridge_owner(alias)
        delete_bridge(k)
        removed.append(bridge_name(k))
        if owner is not None:
            lab_dir = Path(owner[2])
            if (lab_dir / "lab.json").is_file():
                shutil.rmtree(lab_dir, ignore_errors=True)
    return removed


def _subnet_in_use(k: int) -> bool:
    routes = ip("-4", "-o", "route", "show", "table", "all")
    return f"{SUBNET_BASE}.{k}." in routes


def claim_subnet(lab_dir: Path) -> int:
    """Create this lab's bridge on the first free k and stamp it with our owner alias."""
    for k in range(1, 255):
        if _subnet_in_use(k):
            continue
        try:
            ip("link", "add", "name", bridge_name(k), "type", "bridge")
        except NetnsError:
            continue  # another lab won this k between our check and the add
        alias = f"{ALIAS_TAG} owner={owner_token()} dir={lab_dir}"
        ip("link", "set", bridge_name(k), "alias", alias)
        return k
    raise NetnsError(f"no free subnet {SUBNET_BASE}.k.0/24 left")


def _forward_blocked() -> bool:
    """True when bridged packets go through an iptables FORWARD chain that drops by default."""
    try:
        if Path("/proc/sys/net/bridge/bridge-nf-call-iptables").read_text().strip() != "1":
            return False
    except FileNotFoundError:
        return False
    if shutil.which("iptables") is None:
        return False
    rules = subprocess.run(["iptables", "-S", "FORWARD"], capture_output=True, text=True)
    return rules.returncode == 0 and "-P FORWARD ACCEPT" not in rules.stdout


def _forward_rule(k: int) -> list[str]:
    return ["FORWARD", "-i", bridge_name(k), "-o", bridge_name(k), "-j", "ACCEPT"]


def build(k: int, hosts: list[HostNet], host_names: list[str]) -> None:
    """Bridge up on .1, one namespace per host wired to it, /etc/netns hosts files for names."""
    bridge = bridge_name(k)
    root = [f"addr add {SUBNET_BASE}.{k}.1/24 dev {bridge}", f"link set {bridge} up"]
    for host in hosts:
        root += [
            f"netns add {host.namespace}",
            f"link add {host.veth} type veth peer name eth0 netns {host.namespace}",
            f"link set {host.veth} master {bridge} up",
        ]
    ip("-batch", "-", stdin="\n".join(root) + "\n")
    if _forward_blocked():
        subprocess.run(["iptables", "-I", *_forward_rule(k)], check=True)
    # Each host maps its own name (its hostname: its sshd runs in a UTS namespace of its own,
    # testbed.py) to loopback, as a stock Debian or Ubuntu install writes it, and the others'
    # to their LAN addresses, as DNS would: every test meets what real desktops give (gloo
    # then advertises loopback unless told its interface: docs/loopback-hostnames.md).
    lan = list(zip(hosts, host_names, strict=True))
    jobs = []
    for host in hosts:
        etc = NETNS_ETC / host.namespace
        etc.mkdir(parents=True, exist_ok=True)
        own = next(name for net, name in lan if net is host)
        (etc / "hosts").write_text(
            f"127.0.0.1 localhost\n127.0.1.1 {own}\n::1 localhost\n"
            + "".join(f"{net.address} {name}\n" for net, name in lan if net is not host))
        # The root namespace's resolver is unreachable from the lab net: without this every
        # lookup of a name not in hosts (and `getent hosts`'s IPv6 try) waits 10 s to fail.
        (etc / "resolv.conf").write_text("# tfctl lab: no DNS\nnameserver 127.0.0.1\n")
        script = (
            f"addr add {host.address}/24 dev eth0\nlink set eth0 up\nlink set lo up\n"
            f"route add default via {SUBNET_BASE}.{k}.1\n"
        )
        jobs.append(
            subprocess.Popen(
                ["ip", "-n", host.namespace, "-batch", "-"],
                stdin=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
        assert jobs[-1].stdin is not None
        jobs[-1].stdin.write(script)
        jobs[-1].stdin.close()
    for job, host in zip(jobs, hosts, strict=True):
        assert job.stderr is not None
        err = job.stderr.read()
        if job.wait(timeout=60) != 0:
            raise NetnsError(f"configuring {host.namespace}: {err.strip()}")


def delete_bridge(k: int) -> None:
    ip("link", "del", bridge_name(k), check=False)
    if shutil.which("iptables") is None:
        return
    for _ in range(10):  # the rule exists only where FORWARD drops; remove every copy
        if subprocess.run(["iptables", "-D", *_forward_rule(k)], capture_output=True).returncode:
            break


def bridge_lab_dir(k: int) -> Path | None:
    """The lab dir recorded on bridge k, if it exists and is stamped."""
    owner = _bridge_owner(_bridge_aliases().get(k))
    return None if owner is None else Path(owner[2])


def teardown(k: int, hosts: list[HostNet], *, links: bool = True) -> None:
    """Kill every process in each namespace, delete namespaces and (with `links`) veths, bridge."""
    kill_namespace_processes([host.namespace for host in hosts])
    lines = [f"link del {h.veth}" for h in hosts] if links else []
    lines += [f"netns del {h.namespace}" for h in hosts]
    # -force: keep going past parts already gone (a half-built lab).
    ip("-force", "-batch", "-", stdin="\n".join(lines) + "\n", check=False)
    for host in hosts:
        shutil.rmtree(NETNS_ETC / host.namespace, ignore_errors=True)
    with contextlib.suppress(OSError):  # not empty (other namespaces use it) or already gone
        NETNS_ETC.rmdir()
    if links:
        delete_bridge(k)


def _cut_rule(action: str) -> list[str]:
    return ["iptables", action, "INPUT", "-i", "eth0", "-j", "DROP"]


def cut(namespace: str) -> None:
    """Drop everything arriving on the host's link: connects time out, sessions stall."""
    if not is_cut(namespace):
        _netns_run(namespace, _cut_rule("-I"))


def _from_rule(action: str, source: str) -> list[str]:
    return ["iptables", action, "INPUT", "-i", "eth0", "-s", source, "-j", "DROP"]


def cut_from(namespace: str, sources: list[str]) -> None:
    """Drop what arrives on the host's link from these addresses only: a partition between
    hosts, while the client (the bridge's address) still reaches the host."""
    for source in sources:
        if subprocess.run(["ip", "netns", "exec", namespace, *_from_rule("-C", source)],
                          capture_output=True).returncode != 0:
            _netns_run(namespace, _from_rule("-I", source))


def _partitions(namespace: str) -> list[str]:
    """The sources `cut_from` drops on this host's link now."""
    listed = subprocess.run(["ip", "netns", "exec", namespace, "iptables", "-S", "INPUT"],
                            capture_output=True, text=True).stdout
    found = []
    for line in listed.splitlines():
        words = line.split()
        if words[:2] == ["-A", "INPUT"] and "-s" in words and words[-2:] == ["-j", "DROP"]:
            found.append(words[words.index("-s") + 1].removesuffix("/32"))
    return found


def heal(namespace: str) -> None:
    """Undo `cut` and every `cut_from`."""
    while is_cut(namespace):
        _netns_run(namespace, _cut_rule("-D"))
    for source in _partitions(namespace):
        _netns_run(namespace, _from_rule("-D", source))


def is_cut(namespace: str) -> bool:
    probe = ["ip", "netns", "exec", namespace, *_cut_rule("-C")]
    return subprocess.run(probe, capture_output=True).returncode == 0


def _netns_run(namespace: str, argv: list[str]) -> None:
    done = subprocess.run(["ip", "netns", "exec", namespace, *argv], capture_output=True, text=True)
    if done.returncode != 0:
        raise NetnsError(f"{' '.join(argv)} in {namespace}: {done.stderr.strip()}")


def usable() -> bool:
    """Root and `ip netns` works here (some containers forbid it)."""
    if os.geteuid() != 0 or shutil.which("ip") is None:
        return False
    probe = f"{PREFIX}{os.getpid()}probe"
    done = subprocess.run(["ip", "netns", "add", probe], capture_output=True)
    if done.returncode != 0:
        return False
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return True
