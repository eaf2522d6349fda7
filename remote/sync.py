"""`tfctl sync`: the job's source folder to every host's workdir, incremental, all in parallel.

rsync over OpenSSH with exactly the inventory's settings (port, key, known_hosts with strict
checking, jump host); `.gitignore` files and `sync.exclude` are honoured and the run directories
(`.tfctl/`) are never touched. Nothing is deleted on the host unless `delete=True`, and then only
inside the workdir. Where a host has no rsync, changed files (by size and mtime) go over SFTP.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass

from tfctl.inventory.model import Host, Inventory
from tfctl.remote.errors import CommandFailed, RemoteError
from tfctl.remote.fleet import Fleet, FleetResult
from tfctl.remote.local import LocalTransport
from tfctl.remote.ssh import SshOptions
from tfctl.remote.transport import Transport, shell_path

ALWAYS_EXCLUDED = (".tfctl/", "__pycache__/", "*.pyc")


@dataclass(frozen=True)
class SyncResult:
    host: str
    method: str  # "rsync" | "sftp" | "skipped"
    files_transferred: int
    bytes_transferred: int
    changed: tuple[str, ...]
    dest: str
    note: str = ""


Progress = Callable[[str, str], None]


def sync_all(fleet: Fleet, *, delete: bool = False, progress: Progress | None = None
             ) -> FleetResult[SyncResult]:
    inv = fleet.inventory
    source = source_dir(inv)
    if not os.path.isdir(source):
        raise RemoteError("local", f"sync source {source!r} is not a folder",
                          kind="sync_source")
    targets = [h for h in inv.hosts if not h.shared_fs]
    skipped = {h.name: SyncResult(h.name, "skipped", 0, 0, (), h.workdir,
                                  "shared_fs: same filesystem as a synced host")
               for h in inv.hosts if h.shared_fs}
    result = fleet.map(lambda t: sync_host(t, source, inv, fleet.options, delete, progress),
                       targets)
    return FleetResult({**result.values, **skipped}, result.errors)


def source_dir(inv: Inventory) -> str:
    return os.path.normpath(os.path.join(inv.base_dir, inv.job.sync.source))


def sync_host(t: Transport, source: str, inv: Inventory, options: SshOptions, delete: bool,
              progress: Progress | None) -> SyncResult:
    host = t.host
    dest, has_rsync = _prepare_dest(t)
    if os.path.realpath(dest) == os.path.realpath(source) and isinstance(t, LocalTransport):
        return SyncResult(host.name, "skipped", 0, 0, (), dest, "source is the workdir")
    if not has_rsync or shutil.which("rsync") is None:
        from tfctl.remote.sftp_sync import sftp_sync

        if progress:
            progress(host.name, "rsync missing there: copying changed files over SFTP")
        files = list_source_files(source, inv)
        return sftp_sync(t, source, dest, files)
    argv = rsync_argv(host, source, dest, inv, options, delete, isinstance(t, LocalTransport))
    proc = subprocess.run(argv, capture_output=True, text=True, errors="replace")
    if proc.returncode != 0:
        raise CommandFailed(host.name, shlex.join(argv), proc.returncode,
                            "\n".join((proc.stdout + proc.stderr).splitlines()[-10:]))
    changed = tuple(_itemized_files(proc.stdout))
    nbytes = _stat(proc.stdout, r"Total transferred file size: ([\d,.]+)")
    if progress:
        progress(host.name, f"{len(changed)} files, {nbytes} bytes")
    return SyncResult(host.name, "rsync", len(changed), nbytes, changed, dest)


def _prepare_dest(t: Transport) -> tuple[str, bool]:
    """Create the workdir and learn its absolute path and whether rsync exists, in one trip."""
    wd = shell_path(t.host.workdir)
    res = t.run(f"mkdir -p {wd} && cd {wd} && pwd && (command -v rsync || echo NO-RSYNC)",
                timeout_s=30)
    if not res.ok:
        raise CommandFailed(t.host.name, res.command, res.exit_code, res.tail())
    lines = res.stdout.strip().splitlines()
    return lines[0], lines[-1].strip() != "NO-RSYNC"


def ssh_command(host: Host, options: SshOptions) -> list[str]:
    """The OpenSSH client command with the inventory's settings, for rsync's `-e`."""
    argv = ["ssh", "-o", "BatchMode=yes", "-o", f"ConnectTimeout={int(options.connect_timeout_s)}",
            "-o", f"UserKnownHostsFile={os.path.expanduser(host.known_hosts)}",
            "-o", "StrictHostKeyChecking=" + ("accept-new" if options.accept_new_host_keys
                                              else "yes"),
            "-o", "ForwardAgent=no", "-o", "ClearAllForwardings=yes"]
    if host.port:
        argv += ["-p", str(host.port)]
    if host.identity_file:
        argv += ["-i", os.path.expanduser(host.identity_file), "-o", "IdentitiesOnly=yes"]
    if host.user:
        argv += ["-l", host.user]
    if host.jump:
        argv += ["-J", host.jump]
    return argv


def _filters(inv: Inventory) -> list[str]:
    args = [f"--exclude={p}" for p in ALWAYS_EXCLUDED]
    args += [f"--exclude={p}" for p in inv.job.sync.exclude]
    args.append("--filter=:- .gitignore")
    return args


def rsync_argv(host: Host, source: str, dest: str, inv: Inventory, options: SshOptions,
               delete: bool, local: bool) -> list[str]:
    argv = ["rsync", "-a", "--itemize-changes", "--stats", *_filters(inv)]
    if delete:
        argv.append("--delete")  # excluded paths (.tfctl/, outputs) are protected from it
    if local:
        return [*argv, source.rstrip("/") + "/", dest.rstrip("/") + "/"]
    argv += ["-e", shlex.join(ssh_command(host, options))]
    target = f"[{host.address}]" if ":" in host.address else host.address  # IPv6 literal
    return [*argv, source.rstrip("/") + "/", f"{target}:{dest.rstrip('/')}/"]


def list_source_files(source: str, inv: Inventory) -> list[str]:
    """The files a sync would send, with the same filters, listed by rsync locally."""
    argv = ["rsync", "-r", "--list-only", *_filters(inv), source.rstrip("/") + "/"]
    if shutil.which("rsync") is None:
        return _walk(source)
    out = subprocess.run(argv, capture_output=True, text=True, check=True).stdout
    files = []
    for line in out.splitlines():
        if line.startswith("-"):
            files.append(line.split(None, 4)[4])
    return files


def _walk(source: str) -> list[str]:
    out = []
    for root, dirs, names in os.walk(source):
        dirs[:] = [d for d in dirs if d not in (".git", ".tfctl", "__pycache__")]
        out += [os.path.relpath(os.path.join(root, n), source) for n in names]
    return out


def _itemized_files(stdout: str) -> list[str]:
    # rsync -i lines: `>f+++++++++ path` for a sent file; `cd+++` for created dirs.
    return [line[12:] for line in stdout.splitlines()
            if len(line) > 12 and line[0] in "<>" and line[1] == "f"]


def _stat(stdout: str, pattern: str) -> int:
    m = re.search(pattern, stdout)
    return int(m.group(1).replace(",", "").replace(".", "")) if m else 0
