"""Host-key verification against known_hosts: unknown keys refused unless opted in, changed never.

Fabric's default, paramiko's AutoAddPolicy (trust anything, silently), is what tfctl must not do.
On a changed key the message names both fingerprints and the known_hosts line to remove, as
OpenSSH does, because that is what the user must act on.
"""

from __future__ import annotations

import base64
import hashlib
import os
from pathlib import Path

from tfctl.remote.connect._paramiko import paramiko
from tfctl.remote.errors import HostKeyRefused


def fingerprint(key: paramiko.PKey) -> str:
    digest = hashlib.sha256(key.asbytes()).digest()
    return "SHA256:" + base64.b64encode(digest).decode().rstrip("=")


def known_hosts_name(address: str, port: int) -> str:
    """How OpenSSH names a host in known_hosts: bare for port 22, `[addr]:port` otherwise."""
    return address if port == 22 else f"[{address}]:{port}"


class VerifyingPolicy(paramiko.MissingHostKeyPolicy):
    """Refuse unknown keys, or record them (appending one line) when the user opted in."""

    def __init__(self, host_name: str, known_hosts: str, accept_new: bool):
        self.host_name = host_name
        self.known_hosts = known_hosts
        self.accept_new = accept_new
        self.recorded: str | None = None

    def missing_host_key(self, client: paramiko.SSHClient, hostname: str,
                         key: paramiko.PKey) -> None:
        if not self.accept_new:
            raise HostKeyRefused(
                self.host_name,
                f"host key of {hostname} is not in {self.known_hosts} ({key.get_name()} "
                f"{fingerprint(key)}): refused",
                "check the fingerprint with the machine's owner, then run again with "
                "--accept-new-host-keys to record it (or `ssh` to it once)",
            )
        append_known_host(self.known_hosts, hostname, key)
        client.get_host_keys().add(hostname, key.get_name(), key)
        self.recorded = fingerprint(key)


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
