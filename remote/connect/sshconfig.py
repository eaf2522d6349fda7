"""Where and as whom to connect: the inventory's settings over the user's OpenSSH config.

Where an `ssh` client is installed, OpenSSH itself resolves the alias (`ssh -G`, openssh.py):
`Include`, `Match`, tokens, `IdentitiesOnly`, `HostKeyAlias` and the known-hosts files are its
own. Without one, paramiko's parser reads `~/.ssh/config` (then `/etc/ssh/ssh_config`, first
value wins) for `HostName`, `User`, `Port`, `IdentityFile`, `ProxyJump` and `ProxyCommand`.
Either way what the inventory sets explicitly wins over the config, and an alias no config
names is reached as itself, on port 22, as the local user, with the default keys.
"""

from __future__ import annotations

import functools
import getpass
import os
import re
from dataclasses import dataclass, field

from tfctl.remote.connect import openssh
from tfctl.remote.connect._paramiko import load_invoke, paramiko
from tfctl.remote.errors import RemoteError

CONFIG_FILES = ("~/.ssh/config", "/etc/ssh/ssh_config")
DEFAULT_IDENTITIES = ("~/.ssh/id_rsa", "~/.ssh/id_ecdsa", "~/.ssh/id_ecdsa_sk",
                      "~/.ssh/id_ed25519", "~/.ssh/id_ed25519_sk", "~/.ssh/id_xmss",
                      "~/.ssh/id_dsa")
"""What `ssh -G` lists when no IdentityFile is configured (ssh_config(5)); paramiko's
`look_for_keys` tries the same files, so these are left to it."""


@dataclass(frozen=True)
class Target:
    """One SSH endpoint, fully resolved."""

    hostname: str
    port: int
    user: str
    key_filenames: tuple[str, ...] = ()
    look_for_keys: bool = True
    """False when the inventory names a key: only that key (and the config's) are offered."""
    jumps: tuple[Target, ...] = field(default=())
    """Hops to go through, first hop first (ProxyJump, or the inventory's `jump:`)."""
    proxy_command: str | None = None
    known_hosts_files: tuple[str, ...] = ()
    """OpenSSH's UserKnownHostsFile and GlobalKnownHostsFile for this host (`ssh -G`)."""
    host_key_alias: str | None = None
    """HostKeyAlias: the name its key is looked up (and recorded) under in known_hosts."""
    allow_agent: bool = True
    """False with IdentitiesOnly: only the listed key files are offered."""
    certificate_files: tuple[str, ...] = ()
    """CertificateFile: user certificates offered with their keys (`ssh -G`)."""

    @property
    def where(self) -> str:
        return f"{self.hostname}:{self.port}"


@functools.lru_cache(maxsize=4)
def _parsed(paths: tuple[str, ...], stamps: tuple[tuple[int, int] | None, ...]
            ) -> paramiko.SSHConfig:
    config = paramiko.SSHConfig()
    for path in paths:
        try:
            with open(path, encoding="utf-8", errors="replace") as fh:
                config.parse(fh)
        except OSError:
            continue  # unreadable: as OpenSSH, carry on without it
        except Exception as exc:  # paramiko's ConfigParseError and friends
            raise RemoteError("ssh-config", f"{path} cannot be read: {exc}",
                              "fix that line (see `man ssh_config`)") from None
    return config


def user_ssh_config(paths: tuple[str, ...] = CONFIG_FILES) -> paramiko.SSHConfig:
    """The user's and the system's OpenSSH config, re-read when either file changes."""
    full = tuple(os.path.expanduser(p) for p in paths)
    return _parsed(full, tuple(_stamp(p) for p in full))


def _stamp(path: str) -> tuple[int, int] | None:
    try:
        info = os.stat(path)
    except OSError:
        return None
    return info.st_mtime_ns, info.st_size


def lookup(config: paramiko.SSHConfig, alias: str) -> dict[str, object]:
    try:
        return dict(config.lookup(alias))
    except ImportError:  # a `Match exec` block: paramiko runs it through invoke
        if load_invoke():
            return dict(config.lookup(alias))
        raise RemoteError(alias, "your ssh config has a `Match exec` block, which tfctl can "
                          "evaluate only with the `invoke` package installed",
                          "pip install invoke (into tfctl's environment), or give the host's "
                          "address, user and key in the inventory") from None


def resolve(alias: str, user: str | None = None, port: int | None = None,
            identity_file: str | None = None, jump: str | None = None,
            config: paramiko.SSHConfig | None = None, depth: int = 0) -> Target:
    """`alias` as OpenSSH would reach it, with the explicitly given settings winning."""
    if depth > 8:
        raise RemoteError(alias, "ProxyJump chain is longer than 8 hops (a loop?)",
                          "check ProxyJump in your ssh config")
    if config is None and (ssh := openssh.ssh_binary()) is not None:
        return _from_openssh(ssh, alias, user, port, identity_file, jump, depth)
    config = config if config is not None else user_ssh_config()
    found = lookup(config, alias)
    keys = [os.path.expanduser(identity_file)] if identity_file else []
    keys += [os.path.expanduser(str(k)) for k in _as_list(found.get("identityfile"))]
    jumps: tuple[Target, ...] = ()
    hop_spec = jump or _setting(found, "proxyjump")
    if hop_spec:
        jumps = tuple(_hop(h, identity_file, config, depth) for h in hop_spec.split(","))
    command = None if hop_spec else _setting(found, "proxycommand")
    return Target(
        hostname=str(found.get("hostname") or alias),
        port=int(port or int(str(found.get("port") or 22))),
        user=str(user or found.get("user") or getpass.getuser()),
        key_filenames=tuple(dict.fromkeys(keys)),
        look_for_keys=identity_file is None,
        jumps=jumps, proxy_command=command)


def _from_openssh(ssh: str, alias: str, user: str | None, port: int | None,
                  identity_file: str | None, jump: str | None, depth: int) -> Target:
    """`resolve` with OpenSSH's own answer; the inventory's user and port go in as -l/-p."""
    found = openssh.settings(ssh, alias, user, port)

    def one(key: str) -> str | None:
        values = found.get(key)
        return values[0] if values and values[0].lower() != "none" else None

    only = (one("identitiesonly") or "no").lower() == "yes"
    listed = [] if tuple(found.get("identityfile", ())) == DEFAULT_IDENTITIES and not only \
        else [os.path.expanduser(k) for k in found.get("identityfile", ())]
    keys = [os.path.expanduser(identity_file)] if identity_file else []
    keys += [k for k in listed if os.path.exists(k)]
    hostname = one("hostname") or alias
    port_used = int(port or int(one("port") or 22))
    user_used = str(user or one("user") or getpass.getuser())
    hop_spec = jump or one("proxyjump")
    jumps = tuple(_hop(h, identity_file, None, depth) for h in hop_spec.split(",")) \
        if hop_spec else ()
    command = None if hop_spec else one("proxycommand")
    if command:
        tokens = {"%h": hostname, "%p": str(port_used), "%r": user_used, "%n": alias,
                  "%%": "%"}
        command = re.sub(r"%[hprn%]", lambda m: tokens[m.group(0)], command)
    files = [f for key in ("userknownhostsfile", "globalknownhostsfile")
             for value in found.get(key, ()) for f in value.split()]
    return Target(
        hostname=hostname, port=port_used, user=user_used,
        key_filenames=tuple(dict.fromkeys(keys)),
        look_for_keys=identity_file is None and not only,
        jumps=jumps, proxy_command=command,
        known_hosts_files=tuple(dict.fromkeys(os.path.expanduser(f) for f in files)),
        host_key_alias=one("hostkeyalias"), allow_agent=not only,
        certificate_files=tuple(c for c in (os.path.expanduser(f) for f in
                                            found.get("certificatefile", ()))
                                if os.path.exists(c)))


def _hop(spec: str, identity_file: str | None, config: paramiko.SSHConfig | None, depth: int
         ) -> Target:
    """One `[user@]host[:port]` of a jump list, itself resolved through the config; it is
    offered the host's own key first (the inventory names one key per host)."""
    user, _, rest = spec.strip().rpartition("@")
    host, _, port = rest.partition(":")
    if host.startswith("[") and "]" in host:  # [v6addr]:port
        host = host[1:host.index("]")]
    return resolve(host, user or None, int(port) if port else None, identity_file,
                   config=config, depth=depth + 1)


def _setting(found: dict[str, object], key: str) -> str | None:
    """A ProxyJump/ProxyCommand value; `none` (OpenSSH's way to cancel one) is no value."""
    value = found.get(key)
    return None if value is None or str(value).lower() == "none" else str(value)


def _as_list(value: object) -> list[object]:
    if value is None:
        return []
    return list(value) if isinstance(value, list | tuple) else [value]
