"""The agent's eyes on a Linux host: processes, their tfctl tags, and listening sockets, via /proc.

Part of the agent program (`__init__.py`), so it keeps the agent's rules: stdlib only,
Python >= 3.8 on the host, no tfctl imports. Every read tolerates
a process vanishing mid-scan (ENOENT, ESRCH) or belonging to someone else (EACCES): a scan is a
best-effort photograph, and callers re-scan rather than trust one.

Processes are recognised by the `TFCTL_RUN_ID` / `TFCTL_TASK` variables the supervisor puts in
each task's environment (children inherit them, even after `setsid`), never by name, and never
by a pid alone: pids are reused.
"""

from __future__ import annotations

import os
import pwd
import signal
from collections.abc import Iterable

RUN_VAR = b"TFCTL_RUN_ID="
TASK_VAR = b"TFCTL_TASK="
NOTICE_VAR = b"TFCTL_NOTICE="
_LISTEN = "0A"


def list_pids() -> list[int]:
    return [int(name) for name in os.listdir("/proc") if name.isdigit()]


def proc_stat(pid: int) -> tuple[str, int, int] | None:
    """(state letter, process group id, start time in clock ticks), or None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses: split after its last ")".
    fields = data[data.rindex(b")") + 2:].split()
    return fields[0].decode(), int(fields[2]), int(fields[19])


def is_alive(pid: int) -> bool:
    """The process exists and is not a zombie (a zombie no longer runs or holds anything)."""
    stat = proc_stat(pid)
    return stat is not None and stat[0] not in ("Z", "X")


def start_ticks(pid: int) -> int | None:
    stat = proc_stat(pid)
    return None if stat is None else stat[2]


def same_process(pid: int | None, ticks: int | None) -> bool:
    """`pid` is still the process that was recorded (same start time), and alive."""
    if not pid or ticks is None:
        return False
    stat = proc_stat(pid)
    return stat is not None and stat[0] not in ("Z", "X") and stat[2] == ticks


def proc_tags(pid: int) -> tuple[str | None, str | None]:
    """(TFCTL_RUN_ID, TFCTL_TASK) from the process's environment; (None, None) if unreadable,
    and for a `job.notify` command (TFCTL_NOTICE, notify.py): it is given the run id as word of
    the run's end, and is no process of the run (`down` does not wait for it or stop it).

    Runs for every process of the host on every look at a run: a search in the raw block
    (C speed) rather than a split into entries, which cost 13 ms a look on a desktop.
    """
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            data = f.read()
    except OSError:
        return None, None
    if _env_value(data, NOTICE_VAR) is not None:
        return None, None
    return _env_value(data, RUN_VAR), _env_value(data, TASK_VAR)


def _env_value(block: bytes, prefix: bytes) -> str | None:
    """The value of the entry starting with `prefix` (`NAME=`) in a NUL-separated environ."""
    if block.startswith(prefix):
        start = len(prefix)
    else:
        at = block.find(b"\0" + prefix)
        if at < 0:
            return None
        start = at + 1 + len(prefix)
    end = block.find(b"\0", start)
    return block[start:end if end >= 0 else len(block)].decode("utf-8", "replace")


def cmdline(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            data = f.read()
    except OSError:
        return None
    return data.rstrip(b"\0").replace(b"\0", b" ").decode("utf-8", "replace")


def proc_uid(pid: int) -> int | None:
    try:
        return os.stat(f"/proc/{pid}").st_uid
    except OSError:
        return None


def user_name(uid: int | None) -> str | None:
    if uid is None:
        return None
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def tagged_processes(run_id: str | None = None) -> dict[int, tuple[str, str | None]]:
    """pid → (run id, task) of every live process tagged by tfctl (of `run_id` when given)."""
    me = os.getpid()
    found: dict[int, tuple[str, str | None]] = {}
    for pid in list_pids():
        if pid == me:
            continue
        run, task = proc_tags(pid)
        if run is None or (run_id is not None and run != run_id) or not is_alive(pid):
            continue
        if not same_network_namespace(pid):
            continue
        found[pid] = (run, task)
    return found


def same_network_namespace(pid: int) -> bool:
    """True when `pid` lives in our network namespace, i.e. on this host.

    Machines that share one kernel (network-namespace test hosts, containers) share /proc; a
    process of the same run on another such host is that host's business, not ours.
    """
    try:
        return os.readlink(f"/proc/{pid}/ns/net") == os.readlink("/proc/self/ns/net")
    except PermissionError:
        return True  # cannot tell (another user's process): ours, as without shared /proc
    except OSError:
        # Gone, or exiting (its namespaces are released first): on machines sharing /proc, a
        # task another host is stopping at this moment, which this host must not count as one
        # of its own that outlived SIGKILL (seen in the 16-host lab, benchmarks/lab_scale.py).
        return False


def group_members(pgids: Iterable[int]) -> dict[int, int]:
    """pid → pgid of every live process in one of `pgids`."""
    wanted = set(pgids)
    members: dict[int, int] = {}
    if not wanted:
        return members
    for pid in list_pids():
        stat = proc_stat(pid)
        if stat is not None and stat[1] in wanted and stat[0] not in ("Z", "X"):
            members[pid] = stat[1]
    return members


def listening_sockets(ports: Iterable[int] | None = None) -> dict[int, tuple[int, int]]:
    """Socket inode → (port, uid) of every TCP socket in LISTEN state (on `ports` when given).

    Asked of the kernel's socket diagnostics (`sock_diag`, what `ss` asks: netlink, the
    listening sockets only), else read from /proc/net/tcp{,6}, which the kernel builds by
    walking its whole table of connections: ~4 ms per file on an idle host with 262144 hash
    buckets (`net.ipv4.tcp_ehash_entries`), against ~0.1 ms. Both show the asking process's
    network namespace, which is the one the tasks we start live in.
    """
    wanted = None if ports is None else set(ports)
    try:
        return {inode: (port, uid) for inode, (port, uid) in _diag_listening().items()
                if wanted is None or port in wanted}
    except OSError:  # no netlink here (a sandbox, a kernel without inet_diag): the tables
        pass
    found: dict[int, tuple[int, int]] = {}
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                rows = f.read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            cols = row.split()
            if len(cols) < 10 or cols[3] != _LISTEN:
                continue
            port = int(cols[1].rsplit(":", 1)[1], 16)
            if wanted is None or port in wanted:
                found[int(cols[9])] = (port, int(cols[7]))
    return found


_SOCK_DIAG_BY_FAMILY = 20
_NLMSG_ERROR, _NLMSG_DONE = 2, 3
_TCP_LISTEN = 10
_NETLINK_SOCK_DIAG = 4


def _diag_listening() -> dict[int, tuple[int, int]]:
    """Socket inode → (port, uid) of the TCP sockets in LISTEN state, IPv4 and IPv6, from one
    `sock_diag` dump each (sock_diag(7): an `inet_diag_req_v2` asking for the LISTEN state,
    answered with `inet_diag_msg`s). OSError where netlink or inet_diag is not there."""
    import socket
    import struct

    found: dict[int, tuple[int, int]] = {}
    with socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, _NETLINK_SOCK_DIAG) as link:
        for family in (socket.AF_INET, socket.AF_INET6):
            # inet_diag_req_v2: family, protocol, ext, pad, states; a zeroed inet_diag_sockid
            request = struct.pack("=BBBxI", family, socket.IPPROTO_TCP, 0,
                                  1 << _TCP_LISTEN) + bytes(48)
            # nlmsghdr: length, type, flags (NLM_F_REQUEST | NLM_F_DUMP), sequence, port id
            link.sendto(struct.pack("=IHHII", 16 + len(request), _SOCK_DIAG_BY_FAMILY,
                                    0x1 | 0x300, family, 0) + request, (0, 0))
            while not _diag_messages(link.recv(65536), found):
                pass
    return found


def _diag_messages(data: bytes, found: dict[int, tuple[int, int]]) -> bool:
    """The `inet_diag_msg`s of one netlink datagram into `found`; True at the dump's end."""
    import struct

    at = 0
    while at + 16 <= len(data):
        length, kind = struct.unpack_from("=IH", data, at)
        if kind == _NLMSG_DONE:
            return True
        if kind == _NLMSG_ERROR:
            code = struct.unpack_from("=i", data, at + 16)[0]
            raise OSError(-code, "sock_diag refused the dump")
        if length < 16 + 72:  # a message too short to be an inet_diag_msg
            raise OSError("sock_diag answered a message of an unknown shape")
        # inet_diag_msg: family, state, timer, retrans, sockid (sport, dport: big-endian; ...),
        # expires, rqueue, wqueue, uid, inode
        port = struct.unpack_from("!H", data, at + 20)[0]
        uid, inode = struct.unpack_from("=II", data, at + 16 + 64)
        if data[at + 17] == _TCP_LISTEN:
            found[inode] = (port, uid)
        at += (length + 3) & ~3
    return False


def socket_owners(inodes: Iterable[int], pids: Iterable[int] | None = None) -> dict[int, int]:
    """Socket inode → a pid holding it open, looking at `pids` (all visible processes if None)."""
    wanted = {f"socket:[{inode}]": inode for inode in inodes}
    owners: dict[int, int] = {}
    if not wanted:
        return owners
    for pid in list_pids() if pids is None else pids:
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            inode = wanted.get(target)
            if inode is not None and inode not in owners:
                owners[inode] = pid
        if len(owners) == len(wanted):
            break
    return owners


def describe_process(pid: int) -> dict[str, object]:
    """What a person needs to recognise a process: pid, group, user, command, tfctl tags."""
    stat = proc_stat(pid)
    run, task = proc_tags(pid)
    return {"pid": pid, "pgid": None if stat is None else stat[1],
            "user": user_name(proc_uid(pid)), "cmdline": cmdline(pid),
            "tfctl_run_id": run, "tfctl_task": task}


def port_report(ports: Iterable[int]) -> list[dict[str, object]]:
    """Per port: free, or held, with the LISTENing process where this user may see it."""
    ports = list(ports)
    sockets = listening_sockets(ports)
    owners = socket_owners(sockets)
    report: list[dict[str, object]] = []
    for port in ports:
        held = [(inode, uid) for inode, (p, uid) in sockets.items() if p == port]
        entry: dict[str, object] = {"port": port, "free": not held}
        if held:
            inode, uid = next(((i, u) for i, u in held if i in owners), held[0])
            pid = owners.get(inode)
            if pid is None:
                entry.update({"pid": None, "pgid": None, "user": user_name(uid), "cmdline": None,
                              "tfctl_run_id": None, "tfctl_task": None})
            else:
                entry.update(describe_process(pid))
        report.append(entry)
    return report


def signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"SIG{number}"


def send_signal(pid: int, sig: int) -> bool:
    """Signal one process; False when it is already gone or not ours to signal."""
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def signal_group(pgid: int, sig: int) -> bool:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        return False
    return True
