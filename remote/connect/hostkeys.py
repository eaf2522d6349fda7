"""Host-key verification against known_hosts: unknown keys refused unless opted in, changed never.

Fabric's default, paramiko's AutoAddPolicy (trust anything, silently), is what tfctl must not do.
On a changed key the message names both fingerprints and the known_hosts line to remove, as
OpenSSH does, because that is what the user must act on.

The keys are read as OpenSSH reads them (sshd(8), "SSH_KNOWN_HOSTS FILE FORMAT"), from the
inventory's `known_hosts` and the user and global files OpenSSH names for the host
(UserKnownHostsFile, GlobalKnownHostsFile: /etc/ssh/ssh_known_hosts), under the host's
HostKeyAlias when it has one: patterns (`*`, `?`, `!`), hashed names, `@revoked` keys (always
refused) and `@cert-authority` lines. paramiko reads none of the markers, so a host presenting
an OpenSSH host certificate is checked here (`check_host_certificate`): a host certificate,
signed by a CA listed for the host, naming it among its principals, valid now.
"""

from __future__ import annotations

import base64
import hashlib
import os
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tfctl.remote.connect._paramiko import paramiko
from tfctl.remote.errors import HostKeyRefused

CERT_SUFFIX = "-cert-v01@openssh.com"
HOST_CERT = 2  # SSH2_CERT_TYPE_HOST (OpenSSH PROTOCOL.certkeys)
KEY_FIELDS = {"ssh-ed25519": 1, "ecdsa-sha2-nistp256": 2, "ecdsa-sha2-nistp384": 2,
              "ecdsa-sha2-nistp521": 2, "ssh-rsa": 2}
"""Length-prefixed public-key fields between a certificate's nonce and its serial, per type."""


@dataclass(frozen=True)
class KnownKey:
    """One line of a known_hosts file."""

    marker: str  # "", "@cert-authority" or "@revoked"
    patterns: str
    key_type: str
    blob: bytes
    path: str
    line: int

    def matches(self, name: str) -> bool:
        return host_matches(self.patterns, name)

    def pkey(self) -> paramiko.PKey | None:
        try:
            return paramiko.PKey.from_type_string(self.key_type, self.blob)
        except Exception:  # a key type paramiko does not know (sk-*, ssh-dss): skipped
            return None


def host_matches(patterns: str, name: str) -> bool:
    """OpenSSH's matching of a known_hosts host field: comma-separated patterns, `!` negates,
    `|1|salt|hash` is a hashed name."""
    name = name.lower()
    hit = False
    for pattern in patterns.split(","):
        negated = pattern.startswith("!")
        pattern = pattern[1:] if negated else pattern
        if pattern.startswith("|1|"):
            found = paramiko.HostKeys.hash_host(name, pattern) == pattern
        else:
            found = wildcard_match(name, pattern.lower())
        if found and negated:
            return False
        hit = hit or found
    return hit


def wildcard_match(name: str, pattern: str) -> bool:
    """OpenSSH's match_pattern: `*` and `?` only (`[` is literal: `[host]:2222`)."""
    regex = re.escape(pattern).replace(r"\*", ".*").replace(r"\?", ".")
    return re.fullmatch(regex, name, re.S) is not None


def read_known_hosts(paths: Sequence[str]) -> list[KnownKey]:
    """Every usable line of the files that exist (a missing or unreadable one is skipped)."""
    keys: list[KnownKey] = []
    for path in dict.fromkeys(paths):
        try:
            text = Path(path).read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        for n, line in enumerate(text.splitlines(), 1):
            fields = line.split()
            if not fields or fields[0].startswith("#"):
                continue
            marker = fields.pop(0) if fields[0].startswith("@") else ""
            if len(fields) < 3 or marker not in ("", "@cert-authority", "@revoked"):
                continue
            try:
                blob = base64.b64decode(fields[2], validate=True)
            except ValueError:
                continue
            keys.append(KnownKey(marker, fields[0], fields[1], blob, path, n))
    return keys


def fingerprint(key: paramiko.PKey) -> str:
    digest = hashlib.sha256(key.asbytes()).digest()
    return "SHA256:" + base64.b64encode(digest).decode().rstrip("=")


def known_hosts_name(address: str, port: int) -> str:
    """How OpenSSH names a host in known_hosts: bare for port 22, `[addr]:port` otherwise."""
    return address if port == 22 else f"[{address}]:{port}"


class VerifyingPolicy(paramiko.MissingHostKeyPolicy):
    """Refuse unknown keys, or record them (appending one line) when the user opted in; a host
    certificate is accepted when one of `cas` signed it for `name`."""

    def __init__(self, host_name: str, known_hosts: str, accept_new: bool, name: str = "",
                 cas: Sequence[KnownKey] = (), checked: Sequence[str] = ()):
        self.host_name = host_name
        self.known_hosts = known_hosts
        self.accept_new = accept_new
        self.name = name
        """The known_hosts name looked up: HostKeyAlias, or `host` / `[host]:port`."""
        self.cas = cas
        self.checked = tuple(checked) or (known_hosts,)
        self.recorded: str | None = None

    def missing_host_key(self, client: paramiko.SSHClient, hostname: str,
                         key: paramiko.PKey) -> None:
        name = self.name or hostname
        blob = getattr(key, "public_blob", None)
        if blob is not None and blob.key_type.endswith(CERT_SUFFIX):
            why = check_host_certificate(blob.key_blob, principal_of(name), self.cas)
            if why is None:
                return
            raise HostKeyRefused(self.host_name, f"host certificate of {name} refused: {why}",
                                 "ask the machine's owner for a certificate signed by a CA "
                                 "your known_hosts lists (@cert-authority) for this name")
        if not self.accept_new:
            where = ", ".join(f for f in self.checked if os.path.exists(f)) or self.known_hosts
            raise HostKeyRefused(
                self.host_name,
                f"host key of {name} is not in {where} ({key.get_name()} "
                f"{fingerprint(key)}): refused",
                "check the fingerprint with the machine's owner, then run again with "
                "--accept-new-host-keys to record it (or `ssh` to it once)",
            )
        append_known_host(self.known_hosts, name, key)
        client.get_host_keys().add(hostname, key.get_name(), key)
        self.recorded = fingerprint(key)


def principal_of(name: str) -> str:
    """The host name a certificate must list: the known_hosts name without `[…]:port`."""
    if name.startswith("[") and "]:" in name:
        return name[1:name.index("]:")]
    return name


def check_host_certificate(cert: bytes, principal: str, cas: Sequence[KnownKey],
                           now: float | None = None) -> str | None:
    """Why the OpenSSH host certificate `cert` is not valid for `principal` under `cas`, or
    None when it is (the checks of OpenSSH's sshkey_cert_check_authority, PROTOCOL.certkeys)."""
    msg = paramiko.Message(cert)
    try:
        cert_type = msg.get_text()
        base_type = cert_type[:-len(CERT_SUFFIX)]
        if base_type.startswith("rsa-sha2-"):
            base_type = "ssh-rsa"
        msg.get_string()  # nonce
        for _ in range(KEY_FIELDS[base_type]):
            msg.get_string()
        msg.get_int64()  # serial
        kind = msg.get_int()
        msg.get_string()  # key id
        principals_blob = msg.get_string()
        valid_after, valid_before = msg.get_int64(), msg.get_int64()
        msg.get_string()  # critical options (none are defined for host certificates)
        msg.get_string()  # extensions
        msg.get_string()  # reserved
        signer = msg.get_string()
        signed = cert[:msg.packet.tell()]
        signature = msg.get_string()
    except (KeyError, IndexError, ValueError, TypeError, OverflowError):
        return "it cannot be parsed as an OpenSSH certificate"
    if kind != HOST_CERT:
        return "it is a user certificate, not a host certificate"
    listed = []
    p = paramiko.Message(principals_blob)
    while p.get_remainder():
        listed.append(p.get_text())
    if not any(wildcard_match(principal.lower(), x.lower()) for x in listed):
        return f"it names {', '.join(listed) or 'no host'}, not {principal}"
    moment = int(time.time() if now is None else now)
    if not valid_after <= moment < valid_before:
        return "it is not valid now (outside its validity period)"
    trusted = [ca for ca in cas if ca.blob == signer]
    if not trusted:
        return f"its signer (CA {fingerprint_blob(signer)}) is not a @cert-authority for it"
    ca_key = trusted[0].pkey()
    if ca_key is None or not ca_key.verify_ssh_sig(signed, paramiko.Message(signature)):
        return "its signature does not verify against the CA's key"
    return None


def fingerprint_blob(blob: bytes) -> str:
    return "SHA256:" + base64.b64encode(hashlib.sha256(blob).digest()).decode().rstrip("=")


def append_known_host(path: str, hostname: str, key: paramiko.PKey) -> None:
    p = Path(path)
    p.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    prefix = "" if not p.exists() or p.read_bytes().endswith(b"\n") or p.stat().st_size == 0 \
        else "\n"
    fd = os.open(p, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    with os.fdopen(fd, "a") as fh:
        fh.write(f"{prefix}{hostname} {key.get_name()} {key.get_base64()}\n")


def changed_key_error(host_name: str, known_hosts: str, hostname: str,
                      exc: paramiko.BadHostKeyException) -> HostKeyRefused:
    line = known_hosts_line(known_hosts, hostname)
    where = f"{known_hosts}:{line}" if line else known_hosts
    return HostKeyRefused(
        host_name,
        f"host key of {hostname} has CHANGED (offered {exc.key.get_name()} "
        f"{fingerprint(exc.key)}, known {fingerprint(exc.expected_key)} at {where}): refused",
        "if the machine was reinstalled and you trust the new key, remove the old line with "
        f"`ssh-keygen -R '{hostname}' -f {known_hosts}` and run with --accept-new-host-keys; "
        "otherwise someone may be intercepting the connection",
    )


def known_hosts_line(path: str, hostname: str) -> int | None:
    """The 1-based line of `hostname`'s entry in known_hosts (plain or hashed), if any."""
    try:
        lines = Path(path).read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return None
    for n, line in enumerate(lines, 1):
        fields = line.split()
        if not fields or fields[0].startswith("#"):
            continue
        for entry in fields[0].split(","):
            if entry == hostname:
                return n
            if entry.startswith("|1|") and paramiko.HostKeys.hash_host(hostname, entry) == entry:
                return n
    return None


def certificates_first(sock: object, **kwargs: object) -> paramiko.Transport:
    """A paramiko Transport asking for host certificates before plain keys (as OpenSSH's
    default HostKeyAlgorithms does), for a host known only through a @cert-authority line:
    paramiko offers the certificate types after the plain ones, so a server with both would
    otherwise show its plain key, which no line lists."""
    transport: Any = paramiko.Transport(sock, **kwargs)  # type: ignore[arg-type]
    plain = list(transport._preferred_keys)  # the class's order (paramiko's HostKeyAlgorithms)
    transport._preferred_keys = tuple([t + CERT_SUFFIX for t in plain] + plain)
    return transport


def refuse_revoked(host_name: str, client: paramiko.SSHClient, book: Sequence[KnownKey],
                   name: str) -> None:
    """A key (or certificate) listed `@revoked` is refused, whatever else lists it."""
    transport = client.get_transport()
    key = transport.get_remote_server_key() if transport is not None else None
    if key is None:
        return
    blobs = {key.asbytes()}
    cert = getattr(key, "public_blob", None)
    if cert is not None:
        blobs.add(cert.key_blob)
    for entry in book:
        if entry.marker == "@revoked" and entry.blob in blobs:
            client.close()
            raise HostKeyRefused(host_name, f"host key of {name} ({fingerprint(key)}) is "
                                 f"marked @revoked at {entry.path}:{entry.line}: refused",
                                 "the machine's owner revoked this key; ask for the new one")
