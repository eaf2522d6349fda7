"""`tfctl sync`: the job's source folder to every host's workdir, incremental, all in parallel.

rsync over the command's own SSH connection (its remote shell is a bridge to a channel of it; over
OpenSSH with the inventory's settings where a transport cannot relay); `.gitignore` files and
`sync.exclude` are honoured and the run directories (`.tfctl/`) are never touched. Nothing is
deleted on the host unless `delete=True`, and then only inside the workdir. Where a host has no
rsync, changed files (by size and mtime) go over SFTP.

A sync that would change nothing costs no connection of its own: the source is listed once
locally (by rsync itself, so the filters are exactly rsync's, while the fleet connects) with each
path's quick-check signature (type, size, mtime, mode); the host's agent compares them with its
files in the round trip that also creates the workdir. Only if something differs does rsync run,
and then with `--files-from` for just those paths (the whole tree when many differ).
"""

from __future__ import annotations

import base64
import functools
import json
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import threading
import zlib
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from tfctl.inventory.model import Host, Inventory
from tfctl.remote.agent.sync import entry_signature
from tfctl.remote.connect.fleet import Fleet, FleetResult
from tfctl.remote.connect.local import LocalTransport
from tfctl.remote.connect.session import agentclient, agentops
from tfctl.remote.connect.transport import SshOptions, Transport, shell_path
from tfctl.remote.errors import CommandFailed, PythonMissing, RemoteError
from tfctl.remote.sync.put import new_sync, put_changed, worth_putting
from tfctl.remote.sync.result import SyncResult

# `.tfctl-state-*` is the state file older tfctls wrote beside the inventory (it lives in the
# user's state folder now, remote/runs/current.py): not code, and rewritten by every `up` of such
# a tfctl, so syncing it would make every sync after an `up` a changed one. `/runs/` at the
# top is where `tfctl collect` brings runs home: results, never code to send back out.
ALWAYS_EXCLUDED = (".tfctl/", ".tfctl-state-*", "__pycache__/", "*.pyc", "/runs/")


Progress = Callable[[str, str], None]


@dataclass(frozen=True)
class SourceListing:
    """What a sync sends: every path under the source (filters applied) with its signature."""

    entries: tuple[tuple[str, str], ...] | None  # None: not comparable (no local rsync, odd
    # names): rsync everything, as rsync alone would
    blob: str  # the entries as the agent's sync_diff takes them (JSON, zlib, base64)

    @functools.cached_property
    def signatures(self) -> dict[str, str]:
        """path → signature, built once for all the hosts of a sync."""
        return dict(self.entries or ())


def sync_all(fleet: Fleet, *, delete: bool = False, progress: Progress | None = None
             ) -> FleetResult[SyncResult]:
    inv = fleet.inventory
    source = checked_source(inv)
    targets = [h for h in inv.hosts if not h.shared_fs]
    new_sync()
    # Listed while the fleet connects: each host waits for it only after its SSH handshake.
    with ThreadPoolExecutor(max_workers=1) as pool:
        listing = pool.submit(source_listing, source, inv)
        result = fleet.map(lambda t: sync_host(t, source, inv, fleet.options, delete, progress,
                                               listing.result), targets)
    return FleetResult({**result.values, **shared_skips(inv)}, result.errors)


def source_dir(inv: Inventory) -> str:
    return os.path.normpath(os.path.join(inv.base_dir, inv.job.sync.source))


def checked_source(inv: Inventory) -> str:
    """The sync's source folder; RemoteError (host "local") where it is not a folder."""
    source = source_dir(inv)
    if not os.path.isdir(source):
        raise RemoteError("local", f"sync source {source!r} is not a folder",
                          kind="sync_source")
    return source


def shared_skips(inv: Inventory) -> dict[str, SyncResult]:
    """The `shared_fs` hosts' results: never synced, they see a synced host's files."""
    return {h.name: SyncResult(h.name, "skipped", 0, 0, (), h.workdir,
                               "shared_fs: same filesystem as a synced host")
            for h in inv.hosts if h.shared_fs}


def source_listing(source: str, inv: Inventory) -> SourceListing:
    """Every path rsync -a would send (files, links, folders), listed by rsync itself so the
    filters are exactly rsync's, each with its quick-check signature."""
    if shutil.which("rsync") is None:
        return SourceListing(None, "")
    argv = ["rsync", "-a", "--list-only", *_filters(inv), source.rstrip("/") + "/"]
    proc = subprocess.run(argv, capture_output=True, text=True, errors="surrogateescape")
    entries: list[tuple[str, str]] = []
    for line in proc.stdout.splitlines():
        fields = line.split(None, 4)
        if len(fields) < 5 or fields[4] == ".":
            continue
        name = fields[4]
        if line.startswith("l"):
            name, arrow, target = name.partition(" -> ")
            if not arrow or " -> " in target:
                return SourceListing(None, "")
        if "\\#" in name:  # rsync escaped a character in the name: not comparable
            return SourceListing(None, "")
        signature = entry_signature(os.path.join(source, name))
        if signature is None:  # vanished since rsync listed it
            return SourceListing(None, "")
        entries.append((name, signature))
    if proc.returncode != 0:
        return SourceListing(None, "")
    packed = zlib.compress(json.dumps(entries).encode("utf-8", "surrogateescape"), 6)
    return SourceListing(tuple(entries), base64.b64encode(packed).decode())


def sync_host(t: Transport, source: str, inv: Inventory, options: SshOptions, delete: bool,
              progress: Progress | None,
              listing: Callable[[], SourceListing] | None = None) -> SyncResult:
    """Sync one host: one agent round trip finds what differs (usually on the connection the
    command uses anyway); rsync runs only if something does, and then for those paths only."""
    host = t.host
    agentclient.prestart(t)  # connect and start the agent while the listing finishes
    listed = listing() if listing else source_listing(source, inv)
    try:
        diff = agentops.sync_diff(t, host.workdir, listed.blob or _EMPTY, timeout_s=60)
    except PythonMissing:
        # The host's python may be what job.setup creates after this sync: sync as rsync alone
        # would, after a shell round trip for what the agent would have said.
        diff = shell_diff(t)
    return apply_diff(t, source, inv, options, delete, progress, listed, diff)


def apply_diff(t: Transport, source: str, inv: Inventory, options: SshOptions, delete: bool,
               progress: Progress | None, listed: SourceListing, diff: agentops.SyncDiff
               ) -> SyncResult:
    """Bring one host up to date, given what its agent said differs (`sync_diff`, or the same
    answer inside `up`'s one check per host): nothing, the few files over the agent's session,
    or rsync for just those paths (the whole tree when many differ)."""
    host = t.host
    dest, has_rsync = diff.dest, diff.has_rsync
    if os.path.realpath(dest) == os.path.realpath(source) and isinstance(t, LocalTransport):
        return SyncResult(host.name, "skipped", 0, 0, (), dest, "source is the workdir")
    only: list[str] | None = None
    if listed.entries is not None and not delete and diff.count is not None:
        if diff.count == 0:
            if progress:
                progress(host.name, "unchanged")
            return SyncResult(host.name, "unchanged", 0, 0, (), dest,
                              "every file already the same there: nothing sent")
        only = None if diff.differ is None else list(diff.differ)  # None: rsync the whole tree
        if only and worth_putting(listed.signatures, only):
            put = put_changed(t, source, dest, only, listed.signatures)
            if not put.left:
                if progress:
                    progress(host.name, f"{len(put.written)} files, {put.bytes_sent} bytes")
                return SyncResult(host.name, "agent", len(put.written), put.bytes_sent,
                                  put.written, dest, "small change: sent over the agent's session")
            only = list(put.left)
    return _transfer(t, source, dest, has_rsync, inv, options, delete, progress, only)


_EMPTY = base64.b64encode(zlib.compress(b"[]")).decode()


def shell_diff(t: Transport) -> agentops.SyncDiff:
    """What a host whose agent cannot run yet is sent: everything (nothing is known of its
    files), after a shell round trip creates the workdir and says whether rsync is there."""
    return agentops.SyncDiff(*_prepare_dest(t), count=None)


def _prepare_dest(t: Transport) -> tuple[str, bool]:
    """Without the agent: create the workdir, learn its path and whether rsync is there."""
    wd = shell_path(t.host.workdir)
    res = t.run(f"mkdir -p {wd} && cd {wd} && pwd && (command -v rsync || echo NO-RSYNC)",
                timeout_s=30)
    if not res.ok:
        raise CommandFailed(t.host.name, res.command, res.exit_code, res.tail())
    lines = res.stdout.strip().splitlines()
    return lines[0], lines[-1].strip() != "NO-RSYNC"


def _transfer(t: Transport, source: str, dest: str, has_rsync: bool, inv: Inventory,
              options: SshOptions, delete: bool, progress: Progress | None,
              only: list[str] | None) -> SyncResult:
    host = t.host
    if not has_rsync or shutil.which("rsync") is None:
        from tfctl.remote.sync.sftp import sftp_sync

        if progress:
            progress(host.name, "rsync missing there: copying changed files over SFTP")
        files = list_source_files(source, inv)
        if only is not None:
            files = [f for f in files if f in set(only)]
        return sftp_sync(t, source, dest, files)
    argv = rsync_argv(host, source, dest, inv, options, delete, isinstance(t, LocalTransport))
    if only is not None:  # just the paths that differ: rsync skips walking both trees
        argv.insert(1, "--files-from=-")
    proc = run_rsync(t, argv, "".join(p + "\n" for p in only or ()))
    if proc.returncode != 0:
        raise CommandFailed(host.name, shlex.join(argv), proc.returncode,
                            "\n".join((proc.stdout + proc.stderr).splitlines()[-10:]))
    changed = tuple(_itemized_files(proc.stdout))
    nbytes = _stat(proc.stdout, r"Total transferred file size: ([\d,.]+)")
    if progress:
        progress(host.name, f"{len(changed)} files, {nbytes} bytes")
    return SyncResult(host.name, "rsync", len(changed), nbytes, changed, dest)


# rsync's remote shell when the host's transport can relay (SSH): instead of a second login with
# the OpenSSH client (~0.2 s and ~0.1 s of CPU per host here), rsync talks through this bridge
# to its server started on tfctl's own verified connection. argv[1] is a socket inherited from
# tfctl; rsync appends [-l user] host command...; the bridge sends those, then pumps bytes.
# On the paramiko channel under the host's Fabric Connection (`SshTransport.relay`), not Fabric's
# `run`: rsync's protocol is binary and both ways at once, where `run` decodes text streams.
BRIDGE = r"""
import os, select, socket, sys
sock = socket.socket(fileno=int(sys.argv[1]))
head = "\0".join(sys.argv[2:]).encode("utf-8", "surrogateescape")
sock.sendall(b"%08d" % len(head) + head)
inputs = [0, sock]
while sock in inputs:
    for ready in select.select(inputs, [], [])[0]:
        if ready == 0:
            try:
                data = os.read(0, 65536)
            except BlockingIOError:  # rsync may make the pipe non-blocking
                continue
            if data:
                sock.sendall(data)
            else:
                sock.shutdown(socket.SHUT_WR)
                inputs.remove(0)
        else:
            data = sock.recv(65536)
            if not data:
                inputs.remove(sock)
            view = memoryview(data)
            while view:
                try:
                    view = view[os.write(1, view):]
                except BlockingIOError:  # a pull fills rsync's pipe: wait until it drains
                    select.select([], [1], [])
"""
BRIDGE_STUB = 'import os;exec(os.environ["TFCTL_RSYNC_BRIDGE"])'


def run_rsync(t: Transport, argv: list[str], files_from: str
               ) -> subprocess.CompletedProcess[str]:
    if "-e" not in argv:  # a local host: rsync copies by itself
        return subprocess.run(argv, capture_output=True, text=True, errors="replace",
                              input=files_from)
    ours, theirs = socket.socketpair()
    with ours:
        with theirs:
            argv[argv.index("-e") + 1] = shlex.join(
                [sys.executable, "-S", "-c", BRIDGE_STUB, str(theirs.fileno())])
            proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, text=True, errors="replace",
                                    pass_fds=(theirs.fileno(),),
                                    env={**os.environ, "TFCTL_RSYNC_BRIDGE": BRIDGE})
        remote: dict[str, tuple[int | None, str]] = {}
        serve = threading.Thread(target=lambda: remote.update(done=_serve_bridge(t.relay, ours)),
                                 name=f"rsync-{t.host.name}", daemon=True)
        serve.start()
        out, err = proc.communicate(files_from)
        serve.join(30)
    _, remote_err = remote.get("done", (None, ""))
    return subprocess.CompletedProcess(argv, proc.returncode, out, err + remote_err)


def _serve_bridge(relay: Callable[[socket.socket, str], tuple[int | None, str]],
                  sock: socket.socket) -> tuple[int | None, str]:
    """Read the bridge's header (rsync's remote argv) and relay the rest over SSH."""
    size = _read_exactly(sock, 8)
    if len(size) < 8:
        return None, ""  # rsync failed before it started its remote shell
    words = _read_exactly(sock, int(size)).decode("utf-8", "surrogateescape").split("\0")
    i = 0
    while i < len(words) and words[i].startswith("-"):  # [-l user] before the host
        i += 2 if words[i] == "-l" else 1
    return relay(sock, " ".join(words[i + 1:]))  # joined as OpenSSH joins a command


def _read_exactly(sock: socket.socket, count: int) -> bytes:
    data = b""
    while len(data) < count:
        chunk = sock.recv(count - len(data))
        if not chunk:
            break
        data += chunk
    return data


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
    # -s (--secluded-args): paths go to the remote rsync verbatim, not through its shell.
    argv = ["rsync", "-a", "-s", "--itemize-changes", "--stats", *_filters(inv)]
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
