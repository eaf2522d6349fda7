"""One lab host's OpenSSH server: keys, config file and the running `sshd -D` process.

Kept apart from the network plumbing so the same code serves both lab modes: inside a network
namespace (root) and on a loopback port (non-root fallback). Keys are made with ssh-keygen so
they are exactly what a real machine would present.
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

from tests.support.leftovers import SESSION_VAR

SSHD = "/usr/sbin/sshd"
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


class SshdError(RuntimeError):
    """sshd did not come up (the message carries the tail of its log)."""


def start_keygen(key_path: Path, comment: str) -> subprocess.Popen[bytes]:
    """Start making a passphrase-less ed25519 key; several run at once, the caller waits."""
    for stale in (key_path, key_path.with_name(key_path.name + ".pub")):
        stale.unlink(missing_ok=True)
    return subprocess.Popen(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(key_path)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


def wait_keygens(jobs: Sequence[subprocess.Popen[bytes]]) -> None:
    for job in jobs:
        _, err = job.communicate(timeout=30)
        if job.returncode != 0:
            raise SshdError(f"ssh-keygen failed: {err.decode(errors='replace').strip()}")


def public_key_line(key_path: Path) -> str:
    """`ssh-ed25519 AAAA...` without the comment: the form known_hosts entries use."""
    text = key_path.with_name(key_path.name + ".pub").read_text().split()
    return f"{text[0]} {text[1]}"


def write_config(
    path: Path,
    *,
    listen: str,
    port: int,
    host_key: Path,
    authorized_keys: Path,
    pid_file: Path,
    path_dirs: Sequence[Path],
    home: Path | None,
    as_root: bool,
    users_dir: Path | None = None,
    owner: str = "root",
    env: dict[str, str] | None = None,
) -> None:
    """The sshd_config of one host: key-only root login, generous limits, a per-host PATH.

    `home` (when given) becomes the session's HOME and SFTP start directory, so each host has its
    own `~` like a real machine, and the shared /root/.bashrc is not sourced on every command.
    Under a test session its marker (TFCTL_TEST_SESSION, tests/support/leftovers.py) is set in every
    SSH session too, so what a session starts on the host, detached or not, is the suite's.
    With `users_dir`, other Unix users log in too (tests/support/testbed/users.py), each with the
    keys in `users_dir/<user>/authorized_keys` and their own HOME; `home` and `authorized_keys` are
    then the lab `owner`'s alone. `env`: more variables every session gets.
    """
    env_path = ":".join([*map(str, path_dirs), SYSTEM_PATH])
    marker = os.environ.get(SESSION_VAR)
    sftp = "internal-sftp" + (f" -d {home}" if home is not None else "")
    keys_file = authorized_keys if users_dir is None else users_dir / "%u" / "authorized_keys"
    lines = [
        f"ListenAddress {listen}:{port}",
        f"HostKey {host_key}",
        f"PidFile {pid_file}",
        f"AuthorizedKeysFile {keys_file}",
        "PermitRootLogin prohibit-password" if as_root else "PermitRootLogin no",
        "PubkeyAuthentication yes",
        "PasswordAuthentication no",
        "KbdInteractiveAuthentication no",
        # As root, no PAM (fast, no session modules). A non-root sshd cannot read /etc/shadow and
        # would call every account "locked" without PAM, so the loopback fallback keeps it.
        "UsePAM no" if as_root else "UsePAM yes",
        "StrictModes no",
        "MaxStartups 100:30:200",
        "MaxSessions 100",
        "LoginGraceTime 30",
        "UseDNS no",
        "PrintMotd no",
        "PrintLastLog no",
        "X11Forwarding no",
        "AllowTcpForwarding yes",
        "AllowStreamLocalForwarding yes",
        "AcceptEnv LANG LC_*",
        f"Subsystem sftp {sftp}",
        "LogLevel VERBOSE",
    ]
    session = f" {SESSION_VAR}={marker}" if marker else ""
    session += "".join(f" {k}={v}" for k, v in (env or {}).items())
    owner_env = "SetEnv PATH=" + env_path + (f" HOME={home}" if home is not None else "") + session
    if users_dir is None:
        lines.append(owner_env)
    else:  # Match blocks come last: everything after one belongs to it
        lines += ["SetEnv PATH=" + env_path + session, f"Match User {owner}",
                  f"  AuthorizedKeysFile {authorized_keys}", "  " + owner_env]
    path.write_text("\n".join(lines) + "\n")


class SshdProcess:
    """A `sshd -D` started through `prefix` (e.g. `ip netns exec NS ...`), logging to a file.

    `-D` keeps it in the foreground, so the Popen we hold *is* the listener (the prefix commands
    exec into it); stopping it leaves open sessions alive, as restarting a real sshd does.
    """

    def __init__(
        self, prefix: Sequence[str], config: Path, log: Path, address: str, port: int
    ) -> None:
        self.prefix = tuple(prefix)
        self.config = config
        self.log = log
        self.address = address
        self.port = port
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self) -> None:
        if self.running:
            return
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen(
                [*self.prefix, SSHD, "-D", "-e", "-f", str(self.config)],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                start_new_session=True,
            )

    def wait_ready(self, deadline: float) -> None:
        """Until the port accepts TCP; raises with the log tail when sshd exits or time runs out."""
        while True:
            if self.proc is None or self.proc.poll() is not None:
                raise SshdError(f"sshd for {self.address}:{self.port} exited:\n{self.log_tail()}")
            try:
                with socket.create_connection((self.address, self.port), timeout=0.5):
                    return
            except OSError:
                if time.monotonic() > deadline:
                    raise SshdError(
                        f"sshd for {self.address}:{self.port} not accepting:\n{self.log_tail()}"
                    ) from None
                time.sleep(0.01)

    def stop(self) -> None:
        """TERM the listener and reap it; sessions it forked keep running."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)
        self.proc = None

    def log_tail(self, lines: int = 15) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return "(no log)"
