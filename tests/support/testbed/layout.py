"""Where a lab lives on disk and how to find and end what it started, even after a crash.

The lab dir holds the keys, known_hosts, one folder per host (sshd config, log, workdir, home,
bin) and `lab.json`, which names the lab's namespaces and subnet so `destroy_lab_dir` (and
`scripts/lab.py down`) can tear it down from another process.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import tempfile
from dataclasses import dataclass
from pathlib import Path

from tests.support.testbed import netns
from tests.support.testbed.sshd import SYSTEM_PATH

STATE_FILE = "lab.json"


@dataclass(frozen=True)
class LabHost:
    name: str
    address: str
    port: int
    namespace: str | None
    """The network namespace (root mode), None in the loopback fallback."""
    dir: Path
    workdir: Path
    home: Path
    """HOME of SSH sessions on this host (its own `~`)."""
    bin_dir: Path
    """First on the PATH of SSH sessions: put test stand-ins (e.g. nvidia-smi) here."""
    host_key: Path

    @property
    def path_env(self) -> str:
        return f"{self.bin_dir}:{SYSTEM_PATH}"


def make_lab_dir(lab_dir: str | Path | None) -> Path:
    if lab_dir is None:
        return Path(tempfile.mkdtemp(prefix="tfl-lab-"))
    path = Path(lab_dir).absolute()
    if path.exists() and any(path.iterdir()):
        if (path / STATE_FILE).exists():
            pid = running_owner(path)
            if pid is not None:
                raise FileExistsError(f"{path} holds a lab still run by pid {pid}")
            destroy_lab_dir(path)
        else:
            raise FileExistsError(f"{path} is not empty and holds no lab; refusing to use it")
    path.mkdir(parents=True, exist_ok=True)
    return path


def running_owner(lab_dir: Path) -> int | None:
    """The pid of the live process that started the lab in `lab_dir`, None if it is gone."""
    owner = json.loads((lab_dir / STATE_FILE).read_text()).get("owner", "")
    pid, _, start = str(owner).partition(":")
    if pid.isdigit() and start.isdigit() and netns.process_start_time(int(pid)) == int(start):
        return int(pid)
    return None


def make_host(root: Path, name: str, address: str, port: int, namespace: str | None) -> LabHost:
    base = root / name
    host = LabHost(
        name=name,
        address=address,
        port=port,
        namespace=namespace,
        dir=base,
        workdir=base / "work",
        home=base / "home",
        bin_dir=base / "bin",
        host_key=base / "ssh_host_ed25519_key",
    )
    for folder in (host.workdir, host.home, host.bin_dir):
        folder.mkdir(parents=True, exist_ok=True)
    return host


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def kill_descendants(root_pid: int) -> None:
    """SIGKILL the processes below `root_pid` (loopback mode has no namespace to empty)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (FileNotFoundError, ProcessLookupError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    stack = list(children.get(root_pid, []))
    while stack:
        pid = stack.pop()
        stack.extend(children.get(pid, []))
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            continue


def destroy_lab_dir(path: str | Path) -> None:
    """Tear down the lab recorded in `path/lab.json` (its owner gone or not) and remove `path`."""
    path = Path(path).absolute()
    state = json.loads((path / STATE_FILE).read_text())
    if state.get("isolated") and state.get("k") is not None:
        nets = [
            netns.HostNet(h["namespace"], f"{netns.PREFIX}v{state['k']}h{i}", h["address"])
            for i, h in enumerate(state["hosts"])
        ]
        # The bridge (and k) may already belong to a newer lab if ours was found stale.
        netns.teardown(int(state["k"]), nets, links=netns.bridge_lab_dir(state["k"]) == path)
    else:
        for host in state["hosts"]:
            pid_file = path / host["name"] / "sshd.pid"
            if pid_file.exists():
                pid = int(pid_file.read_text().split()[0])
                kill_descendants(pid)
                with contextlib.suppress(ProcessLookupError):  # already gone
                    os.kill(pid, signal.SIGKILL)
    shutil.rmtree(path, ignore_errors=True)


def write_state(
    lab_dir: Path, *, isolated: bool, k: int | None, hosts: tuple[LabHost, ...]
) -> None:
    state = {
        "owner": netns.owner_token(),
        "isolated": isolated,
        "k": k,
        "hosts": [
            {"name": h.name, "address": h.address, "port": h.port, "namespace": h.namespace}
            for h in hosts
        ],
    }
    (lab_dir / STATE_FILE).write_text(json.dumps(state, indent=2) + "\n")
