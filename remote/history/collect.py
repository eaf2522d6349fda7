"""`tfctl collect`: a run's outputs and logs from every host, home, with rsync.

Each host's `job.outputs` folders (checkpoints, events) and its run folder
(`<workdir>/.tfctl/runs/<id>/`: logs, manifest, exit records) are pulled into
`runs/<run-id>/<host>/` beside the inventory, so the run can be restored and looked at on the
user's machine. rsync runs over tfctl's own verified SSH connection (the same bridge `sync`
uses), and only what changed moves on a second collect. A folder a host does not have is
skipped, not an error (`--ignore-missing-args`): a ps host may have written no events.
"""

from __future__ import annotations

import os
import shlex
from dataclasses import dataclass

from tfctl.inventory.model import Host, Inventory
from tfctl.remote.connect.fleet import Fleet, FleetResult
from tfctl.remote.connect.local import LocalTransport
from tfctl.remote.connect.transport import SshOptions, Transport
from tfctl.remote.errors import CommandFailed
from tfctl.remote.sync.rsync import run_rsync, ssh_command

RUN_FOLDER = "tfctl-run"
"""Where a host's run folder (logs, manifest) lands inside `runs/<id>/<host>/`."""


@dataclass(frozen=True)
class Collected:
    """What one host sent: the local folder it went to, and how many files moved."""

    host: str
    dest: str
    files_transferred: int


def collect_root(inv: Inventory, run_id: str) -> str:
    return os.path.join(inv.base_dir, "runs", run_id)


def collect(fleet: Fleet, run_id: str, hosts: list[str],
            outputs: bool = True) -> FleetResult[Collected]:
    """Each host's run folder (and, with `outputs`, its job outputs) into runs/<id>/<host>/."""
    root = collect_root(fleet.inventory, run_id)
    return fleet.map(lambda t: collect_host(t, fleet.inventory, fleet.options, run_id, root,
                                            outputs), hosts)


def collect_host(t: Transport, inv: Inventory, options: SshOptions, run_id: str,
                 root: str, outputs: bool = True) -> Collected:
    dest = os.path.join(root, t.host.name)
    pairs = [(folder, folder) for folder in inv.job.outputs] if outputs else []
    pairs.append((f".tfctl/runs/{run_id}", RUN_FOLDER))
    moved = 0
    for remote, local in pairs:
        target = os.path.join(dest, local)
        os.makedirs(target, exist_ok=True)
        argv = pull_argv(t.host, options, remote, target, isinstance(t, LocalTransport))
        proc = run_rsync(t, argv, "")
        if proc.returncode != 0:
            raise CommandFailed(t.host.name, shlex.join(argv), proc.returncode,
                                "\n".join((proc.stdout + proc.stderr).splitlines()[-10:]))
        moved += sum(1 for line in proc.stdout.splitlines() if line.startswith(">f"))
    return Collected(t.host.name, dest, moved)


def pull_argv(host: Host, options: SshOptions, folder: str, target: str,
              local: bool) -> list[str]:
    """rsync from `<workdir>/<folder>/` on the host into `target/`."""
    workdir = host.workdir
    argv = ["rsync", "-a", "-s", "--itemize-changes", "--ignore-missing-args"]
    if local:
        source = os.path.join(os.path.expanduser(workdir), folder)
        return [*argv, source.rstrip("/") + "/", target.rstrip("/") + "/"]
    # Relative to the login's home, where the remote rsync starts: `-s` passes paths verbatim,
    # so no shell expands a `~`.
    remote = workdir[2:] if workdir.startswith("~/") else workdir
    address = f"[{host.address}]" if ":" in host.address else host.address
    argv += ["-e", shlex.join(ssh_command(host, options))]
    return [*argv, f"{address}:{remote.rstrip('/')}/{folder}/", target.rstrip("/") + "/"]
