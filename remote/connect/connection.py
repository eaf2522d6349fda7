"""A host's SSH connection as a Fabric `Connection`, with tfctl's host-key policy on every hop.

Fabric carries the SSH work (the project is built on Fabric over paramiko): each host, and
each jump host before it, is one `fabric.Connection`; a ProxyJump chain is Fabric's `gateway=`
(a Connection per hop), a ProxyCommand its string gateway. Where to connect comes from
`sshconfig.resolve` (OpenSSH's own `ssh -G`), so Fabric is given a Config that loads no ssh
config or Fabric config file of its own: the settings are resolved once, the same for every
command and the dashboard.

Fabric's default policy, paramiko's AutoAddPolicy (trust any key, silently), is replaced on
every Connection, the jump hosts' included, before it opens: the keys the known-hosts files
list for the host are loaded and `hostkeys.VerifyingPolicy` refuses unknown ones (unless opted
in) and changed ones (always). The hops are opened one by one in order, so a failure names the
hop that failed; the gateway channel is opened with the connect timeout (Fabric's has none).

Fabric is imported with this module, which only `ssh.SshTransport` imports, on a command's
first connection: `--help`, `plan` and `init` never load it (tests/install/test_layers.py).
"""

from __future__ import annotations

import contextlib
import errno
import functools
import os
import socket
from typing import Any

import fabric
from fabric.runners import Remote

from tfctl.inventory.model import Host
from tfctl.remote.connect._paramiko import paramiko
from tfctl.remote.connect.hostkeys import (
    VerifyingPolicy,
    certificates_first,
    changed_key_error,
    known_hosts_name,
    read_known_hosts,
    refuse_revoked,
)
from tfctl.remote.connect.sshconfig import Target
from tfctl.remote.connect.transport import SshOptions
from tfctl.remote.errors import AuthRefused, HostKeyRefused, HostUnreachable, RemoteError


class SessionNotOpened(Exception):
    """A session channel could not be opened: the command never started (safe to retry)."""


class QuickRemote(Remote):
    """Fabric's runner, feeding stdin in one piece. invoke reads a stream that is not a terminal
    one byte at a time with a 10 ms nap between reads (`invoke.terminals.bytes_to_read` answers
    1 without a tty; `Runner.input_sleep`): about 100 bytes/s, 10 s for a 1 kB script. What
    tfctl sends is a program or a request, never a terminal, so it is read and sent whole."""

    read_chunk_size = 1 << 20  # the command's output, likewise

    def read_our_stdin(self, input_: Any) -> Any:
        return input_.read()  # all of it, then "" (EOF: invoke closes the command's stdin)

    def _write_proc_stdin(self, data: bytes) -> None:
        # The command may end without reading its input: a closed pipe, as for `sh`.
        with contextlib.suppress(OSError):
            self.channel.sendall(data)


class SharedConfig(fabric.Config):
    """Fabric's Config, built once and only read after: every connection of every thread
    reads it at once.

    invoke's Config applies any change to it (`_modify`, `_remove`) by `merge()`, which empties
    the whole merged dict and fills it again (invoke/config.py); a thread reading it meanwhile
    (a Connection being built: `self.config.connect_kwargs`) finds no key at all. Here a change
    is never merged: it raises, naming its key, so none slips in unnoticed (a programming error:
    invoke's DataProxy has already stored the value in place when it tells the config). A name
    Fabric sets on a Connection that the Connection does not declare is such a change (the
    DataProxy stores it into the config), hence the declarations on `HostConnection`."""

    def _modify(self, keypath: tuple[str, ...], key: str, value: Any) -> None:
        raise TypeError(f"tfctl's Fabric config is shared by every thread and never changed: "
                        f"{'.'.join((*keypath, key))!r} was set on it (declare it on "
                        "HostConnection if a Connection sets it)")

    def _remove(self, keypath: tuple[str, ...], key: str) -> None:
        self._modify(keypath, key, None)


@functools.lru_cache(maxsize=1)
def fabric_config() -> fabric.Config:
    """Defaults only: no ssh config (resolved already) and no ~/.fabric.yaml or /etc/fabric.*,
    which could otherwise change how tfctl connects behind the inventory's back. Complete when
    built (tfctl's runner an override), then read-only (`SharedConfig`)."""
    return SharedConfig(ssh_config=paramiko.SSHConfig(), lazy=True,
                        overrides={"runners": {"remote": QuickRemote}})


class HostConnection(fabric.Connection):
    """One hop: a Fabric Connection to `target`, verified by tfctl's policy, opened at once."""

    # Declared here: invoke's DataProxy (Fabric's Context) would store an attribute it does
    # not know of into the Connection's config instead, the one config every connection shares
    # (`SharedConfig`). Fabric's own `Connection.__init__` sets `inline_ssh_env`, which
    # fabric.Connection does not declare (fabric/connection.py).
    inline_ssh_env: Any = None
    tfctl_target: Any = None
    known: Any = None
    book: Any = None
    key_name: Any = None
    plain: Any = None

    def __init__(self, host: Host, target: Target, options: SshOptions,
                 gateway: HostConnection | None):
        timeout = max(1, round(options.connect_timeout_s))
        kwargs: dict[str, Any] = {
            "key_filename": list(target.key_filenames),
            "look_for_keys": target.look_for_keys, "allow_agent": target.allow_agent}
        super().__init__(target.hostname, user=target.user, port=target.port,
                         config=fabric_config(), connect_timeout=timeout, forward_agent=False,
                         gateway=gateway or target.proxy_command or False,
                         connect_kwargs=kwargs)
        self.tfctl_target = (host, target, options)
        self.known = os.path.expanduser(host.known_hosts)
        files = (self.known, *target.known_hosts_files)
        self.book = read_known_hosts(files)
        self.key_name = target.host_key_alias or known_hosts_name(target.hostname, target.port)
        plain = [k for k in self.book if not k.marker and k.matches(self.key_name)]
        cas = [k for k in self.book if k.marker == "@cert-authority"
               and k.matches(self.key_name)]
        for entry in plain:  # under the name paramiko looks up; it compares them itself
            if (pkey := entry.pkey()) is not None:
                self.client.get_host_keys().add(known_hosts_name(target.hostname, target.port),
                                                entry.key_type, pkey)
        self.plain = plain
        self.client.set_missing_host_key_policy(VerifyingPolicy(
            host.name, self.known, options.accept_new_host_keys, self.key_name, cas, files))
        if cas and not plain:
            self.connect_kwargs["transport_factory"] = certificates_first
        certified = certified_key(target)
        if certified is not None:
            self.connect_kwargs["pkey"] = certified

    def open_checked(self) -> None:
        """`open`, every failure one sentence naming this hop; a @revoked key refused."""
        host, target, options = self.tfctl_target
        try:
            if not self.gateway:  # else Fabric's gateway gives the socket (`open_gateway`)
                self.connect_kwargs["sock"] = tcp_connect(target.hostname, target.port,
                                                          self.connect_timeout)
            self.open()
            refuse_revoked(host.name, self.client, self.book, self.key_name)
        except paramiko.BadHostKeyException as exc:
            seen = next((k for k in self.plain if k.blob == exc.expected_key.asbytes()), None)
            raise changed_key_error(host.name, seen.path if seen else self.known,
                                    self.key_name, exc) from None
        except RemoteError:
            raise
        except BaseException as exc:
            raise classify_connect_error(host, target, options, exc) from None

    def open_gateway(self) -> Any:
        """Fabric's, with the channel open bounded by the connect timeout, and a ProxyCommand
        taken as resolved (its tokens are expanded already)."""
        if isinstance(self.gateway, str):
            return paramiko.ProxyCommand(self.gateway)
        self.gateway.open()
        return self.gateway.transport.open_channel(
            "direct-tcpip", (self.host, int(self.port)), ("127.0.0.1", 0),
            timeout=self.connect_timeout)

    def create_session(self) -> paramiko.Channel:
        """A session channel for Fabric's `run`, bounded by the connect timeout (paramiko waits
        up to an hour on a dead link otherwise)."""
        try:
            return self.transport.open_session(timeout=self.connect_timeout)
        except (paramiko.SSHException, EOFError, OSError, AttributeError) as exc:
            raise SessionNotOpened(str(exc) or type(exc).__name__) from None


def certified_key(target: Target) -> paramiko.PKey | None:
    """The first of the host's keys a CertificateFile certifies, loaded with it: paramiko finds
    only a certificate kept beside its key (`KEY-cert.pub`), so one named elsewhere in the ssh
    config is paired here (a key with a passphrase is left to paramiko's own search)."""
    for cert in target.certificate_files:
        for key_file in target.key_filenames:
            try:
                key = paramiko.PKey.from_path(key_file)
                key.load_certificate(cert)
            except Exception:  # not its key, unreadable, or a passphrase: the next pair
                continue
            return key
    return None


def tcp_connect(hostname: str, port: int, timeout_s: float) -> socket.socket:
    """A TCP connection to the host's SSH port, tried on each of its addresses as paramiko does.

    The name goes to the resolver as bytes: given a str, Python encodes every name with the
    `idna` codec, whose import (stringprep, unicodedata) costs ~13 ms of each command's start.
    """
    name = hostname.encode("ascii") if hostname.isascii() else hostname.encode("idna")
    return socket.create_connection((name, port), timeout=timeout_s)  # type: ignore[arg-type]


def classify_connect_error(host: Host, target: Target, options: SshOptions,
                           exc: BaseException) -> RemoteError:
    where = target.where
    timeout = options.connect_timeout_s
    if isinstance(exc, HostKeyRefused):
        return exc
    if isinstance(exc, paramiko.AuthenticationException):
        key = host.identity_file or ", ".join(target.key_filenames) or \
            "your default keys / agent"
        return AuthRefused(host.name, f"{where} refused the login of user "
                           f"{target.user!r} with {key}",
                           "check `user:` and `identity_file:` and that the public key is in "
                           "the host's ~/.ssh/authorized_keys")
    if isinstance(exc, socket.timeout | TimeoutError):
        return HostUnreachable(host.name, f"{where} unreachable: no answer within {timeout:g} s")
    if isinstance(exc, paramiko.ssh_exception.NoValidConnectionsError | ConnectionRefusedError):
        return HostUnreachable(host.name, f"{where} refused the connection (is sshd running?)")
    if isinstance(exc, socket.gaierror):
        return HostUnreachable(host.name, f"{target.hostname!r} does not resolve to an address "
                               "(check `address:` or your ~/.ssh/config)")
    if isinstance(exc, OSError) and exc.errno in (errno.EHOSTUNREACH, errno.ENETUNREACH):
        return HostUnreachable(host.name, f"{where} unreachable ({os.strerror(exc.errno)})")
    if isinstance(exc, paramiko.SSHException | EOFError | OSError):
        return HostUnreachable(host.name, f"{where}: SSH failed ({exc or type(exc).__name__})")
    if isinstance(exc, KeyboardInterrupt):
        raise exc
    return RemoteError(host.name, f"{where}: cannot connect ({type(exc).__name__}: {exc})")
