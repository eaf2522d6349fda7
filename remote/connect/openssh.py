"""A host's settings as OpenSSH itself resolves them: `ssh -G`, cached by the config files.

paramiko's SSHConfig ignores `Include` (Debian and Ubuntu ship `Include
/etc/ssh/ssh_config.d/*.conf`), `IdentitiesOnly`, the known-hosts files, `HostKeyAlias` and
most `Match` criteria; `ssh -G ALIAS` prints what the installed client would use, every
directive, token and `Match` applied by OpenSSH itself (ssh(1): "-G Causes ssh to print its
configuration after evaluating Host and Match blocks and exit"). The inventory's user and port
go in as `-l` and `-p`, so they win and `Match user`/`%r` see them.

OpenSSH reads `~/.ssh/config` from the account's home (getpwuid), never `$HOME`; tfctl and its
tests follow `$HOME` (as `os.path.expanduser` does): when it points elsewhere, that home's config
is passed with `-F` (which, as ssh(1) says, also leaves /etc/ssh/ssh_config out).

The answer is cached, in process and in `~/.cache/tfctl/ssh-G.json`, under the `ssh -G` command
line and the size and mtime of every config file it reads (the two configs, and the files their
`Include` lines name), so a changed file is read again; a config with `Match exec` or `Match
localnetwork`, whose answer can change without any file changing, is never cached on disk.
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
import pwd
import re
import shutil
import subprocess
import threading
from pathlib import Path

from tfctl.remote.errors import RemoteError

Settings = dict[str, list[str]]
SYSTEM_CONFIG = "/etc/ssh/ssh_config"
MAX_ENTRIES = 128
_memo: dict[str, Settings] = {}
_lock = threading.Lock()
_VOLATILE = re.compile(rb"^\s*match\b.*\b(exec|localnetwork)\b", re.I | re.M)


def ssh_binary() -> str | None:
    """The OpenSSH client to ask, or None (then paramiko's parser): `TFCTL_SSH_G=0` turns
    this off."""
    if os.environ.get("TFCTL_SSH_G", "1") == "0":
        return None
    return shutil.which("ssh")


def settings(ssh: str, alias: str, user: str | None = None, port: int | None = None
             ) -> Settings:
    """`ssh -G`'s answer for `alias`: lowercase keys, each with its values in order."""
    if not alias or alias.startswith("-") or any(c.isspace() for c in alias):
        raise RemoteError(alias or "?", f"{alias!r} is not a host name or ssh config alias",
                          "check `address:` in the inventory")
    argv = [ssh, "-G"]
    config = _user_config_override()
    if config is not None:
        argv += ["-F", config if os.path.exists(config) else os.devnull]
    if user:
        argv += ["-l", user]
    if port:
        argv += ["-p", str(port)]
    argv.append(alias)
    files, volatile = _config_files(config)
    key = hashlib.sha256(json.dumps([argv, [_stamp(f) for f in files]]).encode()).hexdigest()
    with _lock:
        if key in _memo:
            return _memo[key]
    found = None if volatile else _disk_get(key)
    if found is None:
        found = _ask(argv, alias)
        if not volatile:
            _disk_put(key, found)
    with _lock:
        _memo[key] = found
    return found


def _ask(argv: list[str], alias: str) -> Settings:
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=30,
                              stdin=subprocess.DEVNULL, errors="replace")
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise RemoteError(alias, f"`ssh -G {alias}` could not run ({exc})",
                          "set TFCTL_SSH_G=0 to read the ssh config with paramiko instead") \
            from None
    if proc.returncode != 0:
        why = " ".join(proc.stderr.split())[:300] or f"exit {proc.returncode}"
        raise RemoteError(alias, f"your ssh config cannot be read for {alias!r}: {why}",
                          "fix that line (see `man ssh_config`)")
    found: Settings = {}
    for line in proc.stdout.splitlines():
        name, _, value = line.partition(" ")
        if name:
            found.setdefault(name.lower(), []).append(value.strip())
    return found


def _user_config_override() -> str | None:
    """`$HOME/.ssh/config` when `$HOME` is not the account's home, else None."""
    home = os.path.expanduser("~")
    try:
        account = pwd.getpwuid(os.getuid()).pw_dir
    except KeyError:
        return os.path.join(home, ".ssh", "config")
    if os.path.realpath(home) == os.path.realpath(account):
        return None
    return os.path.join(home, ".ssh", "config")


def _config_files(override: str | None) -> tuple[list[str], bool]:
    """Every config file `ssh -G` reads (Include followed), and whether any has a `Match`
    that depends on more than files (exec, localnetwork)."""
    if override is not None:
        roots = [(override, os.path.dirname(override))]
    else:
        home = pwd.getpwuid(os.getuid()).pw_dir
        roots = [(os.path.join(home, ".ssh", "config"), os.path.join(home, ".ssh")),
                 (SYSTEM_CONFIG, os.path.dirname(SYSTEM_CONFIG))]
    seen: list[str] = []
    volatile = False
    todo = list(roots)
    while todo and len(seen) < 256:
        path, base = todo.pop(0)
        if path in seen:
            continue
        seen.append(path)
        try:
            data = Path(path).read_bytes()
        except OSError:
            continue
        volatile = volatile or bool(_VOLATILE.search(data))
        for line in data.decode(errors="replace").splitlines():
            words = line.strip().split()
            if len(words) > 1 and words[0].lower().rstrip("=") == "include":
                for pattern in words[1:]:
                    full = os.path.join(base, os.path.expanduser(pattern.strip('"')))
                    todo += [(p, base) for p in sorted(glob.glob(full))]
                    todo.append((full, base))  # not there yet: its appearance is a change
    return seen, volatile


def config_stamp() -> str:
    """The ssh config files as they are now (each one's size and mtime, Include'd ones too):
    a connection kept by the holder (hold/) is lent only while this is unchanged, so an edited
    config is read again, as `ssh -G` answers are."""
    override = _user_config_override()
    files, volatile = _config_files(override)
    stamps = [[path, _stamp(path)] for path in files]
    return hashlib.sha256(json.dumps([override, volatile, stamps]).encode()).hexdigest()[:16]


def _stamp(path: str) -> list[int] | None:
    try:
        info = os.stat(path)
    except OSError:
        return None
    return [info.st_mtime_ns, info.st_size]


def _cache_file() -> Path | None:
    if os.environ.get("TFCTL_SSH_G_CACHE", "1") == "0":
        return None
    base = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
    return Path(base) / "tfctl" / "ssh-G.json"


def _disk_get(key: str) -> Settings | None:
    path = _cache_file()
    if path is None:
        return None
    entry = _disk_table(path).get(key)
    return entry if isinstance(entry, dict) else None


_disk_read: dict[str, object] = {}
"""The cache file as this process last read it: its "stamp" (inode, mtime, size) and "table"."""
_disk_lock = threading.Lock()


def _disk_table(path: Path) -> dict[str, object]:
    """The cache file's table, parsed once per process while the file is unchanged (it holds
    up to MAX_ENTRIES answers, ~0.6 MB: parsed per host, it cost a command on 16 hosts ~0.1 s
    of CPU); {} where it cannot be read."""
    with _disk_lock:  # the fleet's threads ask at once: one of them reads, the others wait
        try:
            info = path.stat()
        except OSError:
            return {}
        stamp = (info.st_ino, info.st_mtime_ns, info.st_size)
        if _disk_read.get("stamp") != stamp:
            try:
                table = json.loads(path.read_bytes())
            except (OSError, ValueError):
                table = {}
            _disk_read.update(stamp=stamp, table=table if isinstance(table, dict) else {})
        found = _disk_read["table"]
        return found if isinstance(found, dict) else {}


def _disk_put(key: str, found: Settings) -> None:
    path = _cache_file()
    if path is None:
        return
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        try:
            table = json.loads(path.read_bytes())
            table = table if isinstance(table, dict) else {}
        except (OSError, ValueError):
            table = {}
        table[key] = found
        while len(table) > MAX_ENTRIES:
            table.pop(next(iter(table)))
        tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(json.dumps(table))  # C's encoder: `json.dump` to a file runs Python's
        os.replace(tmp, path)
    except OSError:
        return  # a cache that cannot be written is no error
