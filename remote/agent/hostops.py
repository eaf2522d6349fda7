"""The agent's operations on the host itself: probe, ports, listen, connect, procs, sync_diff,
put_files.

Part of the agent program (`__init__.py`): stdlib only, Python >= 3.8, Linux, no tfctl imports.
Its operations are in the table of `optable.py`; each takes its request as the vocabulary's
record (vocab.py) and answers with one.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any

from tfctl.remote.agent.detach import fork_detached
from tfctl.remote.agent.disk import room_at
from tfctl.remote.agent.freeports import choose_ports, release
from tfctl.remote.agent.fwprobe import FW_DISTRIBUTIONS, fw_probe, installed_versions
from tfctl.remote.agent.netroute import hostname_addresses
from tfctl.remote.agent.proc import describe_process, is_alive, port_report, user_name
from tfctl.remote.agent.rundir import expand
from tfctl.remote.agent.sync import put_files, sync_diff
from tfctl.remote.agent.tfprobe import tf_probe
from tfctl.remote.agent.vocab import (
    ConnectAnswer,
    ConnectRequest,
    ConnectResult,
    ListenAnswer,
    ListenRequest,
    PortsAnswer,
    PortsRequest,
    PortState,
    ProbeAnswer,
    ProbeRequest,
    ProcsAnswer,
    ProcsRequest,
    PutAnswer,
    PutFilesRequest,
    SyncDiff,
    SyncDiffRequest,
)
from tfctl.remote.agent.wire import which


def hostname() -> str:
    """The host's name, as `socket.gethostname()` gives it, without importing socket."""
    return os.uname().nodename


TF_DISTRIBUTIONS = ("tensorflow", "tensorflow-cpu", "tf-nightly", "tensorflow-gpu")


def op_probe(req: ProbeRequest) -> ProbeAnswer:
    if sys.flags.no_site:  # started with -S (see agentclient): find installed packages now
        import site

        site.main()

    installed = installed_versions(TF_DISTRIBUTIONS)
    tf_version = next(iter(installed.values()), None)
    workdir = req.workdir
    tensorflow = tf_probe(installed, req.fresh) if req.ask_tf else None
    versions = installed_versions(FW_DISTRIBUTIONS) if req.ask else {}
    return ProbeAnswer(
        tensorflow, installed, sys.version.split()[0], sys.executable, tf_version,
        which("nvidia-smi"), os.path.expanduser("~"),
        None if workdir is None else expand(workdir),
        None if workdir is None else room_at(expand(workdir)), hostname(),
        which("rsync"), user_name(os.getuid()), os.getuid(),
        os.environ.get("TFCTL_CONFIGURED_PYTHON_MISSING") == "1", versions,
        {name: fw_probe(name, versions, req.fresh) for name in req.ask},
        tuple(hostname_addresses()[1]) if req.ask_hostname else ())


def op_ports(req: PortsRequest) -> PortsAnswer:
    answer = PortsAnswer(port_states(req.ports), choose_from(req.choose) if req.choose else None)
    if req.release:  # an `up` that will not start frees the ports it leased
        release(req.release)
    return answer


def port_states(ports: Any) -> tuple[PortState, ...]:
    """Each port free, or who holds it (`proc.port_report`)."""
    return tuple(PortState.from_wire(entry) for entry in port_report(int(p) for p in ports))


def choose_from(ask: dict[str, Any]) -> dict[str, Any]:
    """Free ports for the tasks whose port is chosen at up (freeports.py): `ask` has `tasks`
    ([{"task", "preferred"}]), `range` ([low, high]), `fixed` (the run's written ports here)
    and the `up`'s lease `token` (none from `check`, which only asks)."""
    low, high = (int(x) for x in ask["range"])
    return choose_ports(list(ask.get("tasks", [])), low, high, ask.get("fixed", ()),
                        ask.get("token"))


def op_listen(req: ListenRequest) -> ListenAnswer:
    """Hold listening sockets for a while in a detached process, so peers can test reaching us."""
    import socket

    seconds = req.seconds
    bound: list[socket.socket] = []
    busy: dict[str, str] = {}
    for port in (int(p) for p in req.ports):
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(("", port))
            sock.listen(64)
        except OSError as exc:
            sock.close()
            busy[str(port)] = exc.strerror or str(exc)
            continue
        bound.append(sock)
    holder = None
    if bound:
        holder = fork_detached(lambda: _serve_until(bound, time.time() + seconds),
                               keep=tuple(sock.fileno() for sock in bound))
    ports = [sock.getsockname()[1] for sock in bound]
    for sock in bound:
        sock.close()
    return ListenAnswer(tuple(ports), busy, holder)


def _serve_until(socks: list[Any], deadline: float) -> int:
    # Connections are never accepted: the kernel completes the handshake from the backlog, the
    # peer closes first, and the TIME-WAIT stays on its side, so our task ports are free at once.
    while time.time() < deadline:
        time.sleep(max(0.0, min(0.5, deadline - time.time())))
    return 0


def op_connect(req: ConnectRequest) -> ConnectAnswer:
    """TCP connects from this host to each `address:port` of `targets`, each answered with
    `why` it failed: `unresolved` (this host cannot turn the name into an address, so no
    firewall is to blame), `refused`, `timeout` or `error`; None when it connected."""
    import socket

    timeout_s = req.timeout_s
    results = []
    for target in req.targets:
        addr, _, port = str(target).rpartition(":")
        started = time.time()
        error, why = None, None
        address = (addr.strip("[]"), 0)
        try:
            address = (address[0], int(port))
            socket.getaddrinfo(address[0], address[1], 0, socket.SOCK_STREAM)
        except (OSError, ValueError, UnicodeError) as exc:  # socket.gaierror is an OSError
            error, why = str(exc) or type(exc).__name__, "unresolved"
        if why is None:
            try:
                socket.create_connection(address, timeout=timeout_s).close()
            # Python 3.8's socket.timeout is not yet TimeoutError; both are OSErrors.
            except (socket.timeout, TimeoutError) as exc:  # noqa: UP041
                error, why = str(exc) or "timed out", "timeout"
            except ConnectionRefusedError as exc:
                error, why = str(exc) or "connection refused", "refused"
            except OSError as exc:
                error, why = str(exc) or type(exc).__name__, "error"
        results.append(ConnectResult(str(target), error is None, error, why,
                                     round((time.time() - started) * 1000, 1)))
    return ConnectAnswer(tuple(results))


def op_sync_diff(req: SyncDiffRequest) -> SyncDiff:
    return SyncDiff.from_wire(sync_diff(expand(str(req.workdir)), str(req.entries)))


def op_put_files(req: PutFilesRequest) -> PutAnswer:
    return PutAnswer.from_wire(put_files(expand(str(req.workdir)), req.files))


def op_procs(req: ProcsRequest) -> ProcsAnswer:
    """Who each pid is (user, command, tfctl run and task): nvidia-smi names only the pid.

    A pid gone since it was listed answers None (pids are reused: never guess).
    """
    return ProcsAnswer({str(p): describe_process(p) if is_alive(p) else None
                        for p in (int(p) for p in req.pids)})
