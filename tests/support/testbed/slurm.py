"""A real Slurm cluster over the lab: munge, slurmctld, and one slurmd per lab host.

Debian's `slurm-wlm` (22.05) and `munge`, nothing stood in: `slurmctld` listens on the lab
bridge's address in the root namespace (where `sbatch`, `squeue`, `scancel` run, as tfctl's
`slurm: {host: local}`), and each lab host runs `slurmd -N <host>` inside its network namespace
(`ip netns exec`, which also mounts the host's /etc/netns hosts file over /etc/hosts, so node
names resolve there as TensorFlow needs). Everything lives under one temp dir: the munge key (new
per cluster), its socket (`AuthInfo=socket=...`, so the machine's own munge is never used),
state, spool and logs; `SLURM_CONF` points the client commands at it.

Settings that make it work in a container (measured on the CI machine): `SlurmdParameters=
config_overrides` (a node may claim more CPUs than the machine has), `ProctrackType=
proctrack/linuxproc` and `TaskPlugin=task/none` (no cgroup controllers needed), and a
`cgroup.conf` with `CgroupPlugin=cgroup/v1` (slurmd refuses to start without one it can load).
No accounting daemon: `scontrol show job` is the state (kept `MinJobAge` seconds after the end).
Each node has `gres gpu:2` backed by plain files (gres.conf `File=`): Slurm counts and allocates
them but binds none (sets no CUDA_VISIBLE_DEVICES), so a job's masks are the script's.
See https://slurm.schedmd.com/slurm.conf.html.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from tests.support.leftovers import stop_groups
from tests.support.testbed import netns
from tests.support.testbed.testbed import Testbed

DAEMONS = ("munged", "slurmctld", "slurmd")
CLIENTS = ("sbatch", "squeue", "scancel", "scontrol", "srun")


def slurm_missing() -> str | None:
    """Why a real Slurm cannot run here, or None."""
    if os.geteuid() != 0:
        return "a real Slurm in the lab needs root (slurmd in the hosts' network namespaces)"
    missing = [p for p in (*DAEMONS, *CLIENTS) if shutil.which(p) is None and
               not Path("/usr/sbin", p).exists()]
    if missing:
        return (f"Slurm is not installed ({', '.join(missing)} missing): apt-get install "
                "slurm-wlm munge")
    return None


def _program(name: str) -> str:
    return shutil.which(name) or str(Path("/usr/sbin", name))


def _free_port(address: str) -> int:
    with socket.socket() as sock:
        sock.bind((address, 0))
        return int(sock.getsockname()[1])


class SlurmCluster:
    """`SlurmCluster(lab)` returns once every lab host is an idle node; `close()` ends it all."""

    def __init__(self, testbed: Testbed, cpus: int = 16, gpus: int = 2,
                 start_timeout_s: float = 60.0) -> None:
        if not testbed.isolated or testbed.gateway is None:
            raise RuntimeError("a Slurm lab needs the isolated (network-namespace) lab")
        self.lab = testbed
        cleanup_stale()
        self.dir = Path(tempfile.mkdtemp(prefix=PREFIX))
        self.dir.chmod(0o755)
        (self.dir / OWNER).write_text(netns.owner_token())
        self.conf = self.dir / "slurm.conf"
        self.env = {**os.environ, "SLURM_CONF": str(self.conf)}
        """The environment client commands (and tfctl) need to reach this cluster."""
        self.nodes = testbed.names
        self._procs: list[subprocess.Popen[bytes]] = []
        try:
            self._start(cpus, gpus, start_timeout_s)
        except BaseException:
            self.close()
            raise

    # ---------------------------------------------------------------- start and stop

    def _start(self, cpus: int, gpus: int, timeout_s: float) -> None:
        d = self.dir
        for sub in ("state", "spool", "munge"):
            (d / sub).mkdir(mode=0o700)
        key = d / "munge" / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o400)
        self.munge_socket = d / "munge" / "munge.socket"
        self._spawn([_program("munged"), "--foreground", "--force",
                     f"--socket={self.munge_socket}", f"--key-file={key}",
                     f"--pid-file={d / 'munge' / 'munged.pid'}",
                     f"--log-file={d / 'munge' / 'munged.log'}",
                     f"--seed-file={d / 'munge' / 'munged.seed'}"], d / "munged.out")
        self._wait(lambda: self.munge_socket.exists(), timeout_s, "munged's socket")
        gateway = self.lab.gateway
        assert gateway is not None
        ctld_port = _free_port(gateway)
        gres = f" Gres=gpu:{gpus}" if gpus else ""
        nodes = "\n".join(f"NodeName={h.name} NodeAddr={h.address} CPUs={cpus}{gres} "
                          "State=UNKNOWN" for h in self.lab.hosts)
        # GPUs as plain files (`gres.conf` File=): Slurm counts and allocates them, binds none.
        (d / "gpus").mkdir()
        for i in range(gpus):
            (d / "gpus" / f"gpu{i}").touch()
        (d / "gres.conf").write_text(
            f"Name=gpu File={d / 'gpus'}/gpu[0-{gpus - 1}]\n" if gpus else "")
        self.conf.write_text(f"""\
ClusterName=tfctllab
GresTypes=gpu
SlurmctldHost={socket.gethostname()}({gateway})
SlurmctldPort={ctld_port}
SlurmdPort={_free_port(gateway)}
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={self.munge_socket}
SlurmUser=root
SlurmdUser=root
StateSaveLocation={d / 'state'}
SlurmdSpoolDir={d / 'spool'}/%n
SlurmctldPidFile={d / 'slurmctld.pid'}
SlurmdPidFile={d}/slurmd-%n.pid
SlurmctldLogFile={d / 'slurmctld.log'}
SlurmdLogFile={d}/slurmd-%n.log
SlurmdParameters=config_overrides
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SwitchType=switch/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
ReturnToService=2
SchedulerParameters=sched_interval=1
KillWait=5
MinJobAge=300
SlurmctldTimeout=30
SlurmdTimeout=30
{nodes}
PartitionName=lab Nodes=ALL Default=YES MaxTime=INFINITE State=UP
""")
        (d / "cgroup.conf").write_text("CgroupPlugin=cgroup/v1\n")
        self._spawn([_program("slurmctld"), "-D", "-i", "-f", str(self.conf)],
                    d / "slurmctld.out")
        self._wait(lambda: self._answers(), timeout_s, "slurmctld")
        for host in self.lab.hosts:
            assert host.namespace is not None
            (d / "spool" / host.name).mkdir()
            self._spawn(["ip", "netns", "exec", host.namespace, _program("slurmd"), "-D",
                         "-N", host.name, "-f", str(self.conf)], d / f"slurmd-{host.name}.out")
        self._wait(self._all_idle, timeout_s, "every slurmd registered (nodes idle)")

    def _spawn(self, argv: list[str], out: Path) -> None:
        with out.open("wb") as fh:
            self._procs.append(subprocess.Popen(argv, stdout=fh, stderr=subprocess.STDOUT,
                                                stdin=subprocess.DEVNULL, env=self.env,
                                                start_new_session=True))

    def _wait(self, ready: Callable[[], bool], timeout_s: float, what: str) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if ready():
                return
            dead = [p for p in self._procs if p.poll() is not None]
            if dead:
                raise RuntimeError(f"waiting for {what}: {dead[0].args!r} exited "
                                   f"({dead[0].returncode}); logs:\n{self.logs()}")
            time.sleep(0.2)
        raise RuntimeError(f"{what}: not ready within {timeout_s:g} s; logs:\n{self.logs()}")

    def _answers(self) -> bool:
        return self.run("scontrol", "ping", check=False).returncode == 0

    def _all_idle(self) -> bool:
        out = self.run("sinfo", "-h", "-N", "-o", "%N %t", check=False).stdout.split("\n")
        states = dict(line.split() for line in out if line.strip())
        return set(states) == set(self.nodes) and all(s == "idle" for s in states.values())

    def logs(self, lines: int = 15) -> str:
        parts = []
        for path in sorted(self.dir.glob("*.log")) + sorted(self.dir.glob("*.out")):
            tail = path.read_text(errors="replace").splitlines()[-lines:]
            parts.append(f"== {path.name}\n" + "\n".join(tail))
        return "\n".join(parts)

    def run(self, *argv: str, check: bool = True, timeout: float = 30
            ) -> subprocess.CompletedProcess[str]:
        """A Slurm client command against this cluster (from the root namespace)."""
        done = subprocess.run(list(argv), capture_output=True, text=True, env=self.env,
                              timeout=timeout)
        if check and done.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)}: {done.stderr.strip()}")
        return done

    def client_wrappers(self) -> dict[str, str]:
        """The Slurm client commands as scripts pointed at this cluster (SLURM_CONF), by name:
        for a lab host's PATH, where tfctl reaches them over SSH (the real programs run)."""
        return {name: f'#!/bin/sh\nSLURM_CONF={self.conf} exec {_program(name)} "$@"\n'
                for name in (*CLIENTS, "sacct")}

    def jobs(self) -> list[str]:
        """Job ids Slurm still runs or holds (pending, running, completing)."""
        return self.run("squeue", "-h", "-o", "%i").stdout.split()

    def step_processes(self) -> list[int]:
        """Every slurmstepd (a job step's keeper) on the lab's nodes, and what runs below it."""
        namespaces = [h.namespace for h in self.lab.hosts if h.namespace is not None]
        here = [p for found in netns.pids_by_namespace(namespaces).values() for p in found]
        steps = [p for p in here if _comm(p) == "slurmstepd"]
        return sorted({p for s in steps for p in (s, *_descendants(s))})

    def cancel_all(self) -> None:
        """Cancel every job (a test's leftovers), so the next test finds idle nodes."""
        if self.jobs():
            self.run("scancel", "--full", *self.jobs(), check=False)

    def close(self) -> None:
        """Stop slurmd, slurmctld and munged, kill what steps left, remove the temp dir."""
        stop_groups(reversed(self._procs), 10)
        for pid in self.step_processes():  # slurmstepd daemonizes: not in any group above
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        self._procs.clear()
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> SlurmCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


PREFIX = "tfl-slurm-"
OWNER = "owner"
"""`pid:start time` of the process that made the cluster (tests/support/testbed/netns.py's
token)."""


def cleanup_stale() -> list[int]:
    """Kill the daemons of clusters whose owner died without `close()` (a killed pytest), by
    their command lines naming its folder, and remove the folder; the pids killed."""
    killed: list[int] = []
    for folder in Path(tempfile.gettempdir()).glob(PREFIX + "*"):
        try:
            pid, start = (int(x) for x in (folder / OWNER).read_text().split(":"))
        except (OSError, ValueError):
            continue
        if netns.process_start_time(pid) == start:
            continue  # its owner still runs
        for proc in _all_pids():
            try:
                cmdline = Path(f"/proc/{proc}/cmdline").read_bytes()
            except OSError:
                continue
            if str(folder).encode() in cmdline:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(proc, signal.SIGKILL)
                    killed.append(proc)
        shutil.rmtree(folder, ignore_errors=True)
    return killed


def _all_pids() -> list[int]:
    return [int(e) for e in os.listdir("/proc") if e.isdigit()]


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def _descendants(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for pid in _all_pids():
        try:
            ppid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(pid)
    found, stack = [], list(children.get(root, []))
    while stack:
        pid = stack.pop()
        found.append(pid)
        stack.extend(children.get(pid, []))
    return found
