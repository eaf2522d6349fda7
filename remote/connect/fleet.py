"""Run one step on every host in parallel and keep each host's value or error.

A slow or dead host never delays another beyond its own connect timeout; results come back as
a `FleetResult` with `.succeeded` / `.failed`, as fabric's GroupResult does. One transport per
host lives for the whole command, so later steps reuse the connection instead of reconnecting.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Generic, TypeVar

from tfctl.inventory.model import Host, Inventory
from tfctl.remote.connect.local import LocalTransport
from tfctl.remote.connect.session import agentclient
from tfctl.remote.connect.transport import SshOptions, Transport
from tfctl.remote.errors import RemoteError

T = TypeVar("T")

# Parallel connections: enough for a lab of a few dozen desktops at once, bounded so that a
# big inventory cannot exhaust local file descriptors or sshd's MaxStartups (default 10:30:100).
MAX_PARALLEL = 32


@dataclass(frozen=True)
class FleetResult(Generic[T]):
    values: Mapping[str, T]
    errors: Mapping[str, RemoteError]

    @property
    def succeeded(self) -> Mapping[str, T]:
        return self.values

    @property
    def failed(self) -> Mapping[str, RemoteError]:
        return self.errors

    @property
    def ok(self) -> bool:
        return not self.errors


def _ssh_transport(host: Host, options: SshOptions) -> Transport:
    # Imported on the first connection, not with this module: until then (loading the inventory,
    # listing the sync source) the command does not wait for Fabric's and paramiko's import
    # (~0.15 s of a fresh process, benchmarks/README.md); a command that borrows its agent
    # sessions from a holder (hold/) never imports them.
    if options.persist_s > 0:
        from tfctl.remote.connect.hold.borrow import HeldTransport

        return HeldTransport(host, options)
    from tfctl.remote.connect.ssh import SshTransport

    return SshTransport(host, options)


class Fleet:
    """The hosts of an inventory with one lazily opened transport each."""

    def __init__(self, inventory: Inventory, options: SshOptions | None = None):
        self.inventory = inventory
        self.options = options or SshOptions()
        self._transports: dict[str, Transport] = {}
        self._lock = threading.Lock()  # the UI's pollers and the telemetry streams share a fleet
        if self.options.persist_s > 0 and any(h.transport != "local" for h in inventory.hosts):
            # The holder its agent sessions will come from, started now if none runs: its
            # start overlaps this command's own until its first request (hold/borrow.py).
            from tfctl.remote.connect.hold.borrow import start_holder

            start_holder(self.options.persist_s)

    def transport(self, host: Host | str) -> Transport:
        h = self.inventory.host(host) if isinstance(host, str) else host
        with self._lock:
            if h.name not in self._transports:
                self._transports[h.name] = (LocalTransport(h) if h.transport == "local"
                                            else _ssh_transport(h, self.options))
            return self._transports[h.name]

    def map(self, step: Callable[[Transport], T], hosts: Iterable[Host | str] | None = None
            ) -> FleetResult[T]:
        chosen = [self.inventory.host(h) if isinstance(h, str) else h
                  for h in (self.inventory.hosts if hosts is None else hosts)]
        values: dict[str, T] = {}
        errors: dict[str, RemoteError] = {}
        if not chosen:
            return FleetResult(values, errors)

        def one(host: Host) -> None:
            try:
                values[host.name] = step(self.transport(host))
            except RemoteError as exc:
                errors[host.name] = exc
            except OSError as exc:
                errors[host.name] = RemoteError(host.name, f"I/O error: {exc}")

        with ThreadPoolExecutor(max_workers=min(MAX_PARALLEL, len(chosen))) as pool:
            list(pool.map(one, chosen))
        order = [h.name for h in chosen]
        return FleetResult({k: values[k] for k in order if k in values},
                           {k: errors[k] for k in order if k in errors})

    def close(self) -> None:
        # Agent sessions first: each agent sees its input end and exits before the connection
        # goes, so nothing tfctl started for itself is left running on a host after it returns
        # (the sessions a holder lent go back to it, open, for the next command: hold/).
        transports = list(self._transports.values())
        agentclient.end_sessions(transports)
        for t in transports:
            t.close()
        self._transports.clear()

    def __enter__(self) -> Fleet:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
