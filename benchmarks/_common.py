"""What the benchmarks share: the machine line, timing a command with its CPU, medians, the lab.

Every benchmark runs its contenders in one process, interleaved (A B, then B A, ...), and prints
medians and their ratios: on a shared 2-core machine absolute times drift with the neighbours'
load, ratios taken side by side drift much less.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime
import os
import platform
import re
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tests.support.testbed import Testbed

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

PYTHON = sys.executable
LIGHT_JOB = ROOT / "tests" / "support" / "lightjob.py"
TASKS = ("ps:0", "worker:0", "worker:1")
"""The light job's tasks on each host (`light_inventory`)."""
PORTS = {"ps": 2222, "worker": 2223}
"""The ports the pdsh peers give the light job's ps and first worker (the second: +1)."""
SUPERVISION = ("tfctl-supervise", "tfctl-watch", "tfctl-keeper")
"""The names (/proc/<pid>/comm) of a run's host-side processes that are not its tasks."""


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine_line() -> str:
    """Date, host, CPU model, core count, kernel and load: printed above every result."""
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    return (f"{datetime.datetime.now().isoformat(timespec='seconds')} · {platform.node()} · "
            f"{cpu_model()} · nproc {os.cpu_count()} · {platform.system()} "
            f"{platform.release()} · load {load}")


def machine_busy_s() -> float:
    """CPU seconds this machine's cores have spent not idle since boot (/proc/stat), minus this
    benchmark process's own: a window's difference is what everything else used in it (in the
    lab: the client, every sshd, agent and task of the hosts, which share these cores)."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    own = resource.getrusage(resource.RUSAGE_SELF)
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK") - own.ru_utime - own.ru_stime


@dataclass(frozen=True)
class Timed:
    """One command: wall time, and CPU (user+sys) of it and every descendant it waited for."""

    wall_s: float
    cpu_s: float
    returncode: int
    stdout: str
    stderr: str
    machine_cpu_s: float = 0.0
    """CPU the whole machine spent meanwhile (`machine_busy_s`): in the lab, hosts' work too."""

    def check(self, what: str) -> Timed:
        if self.returncode != 0:
            raise SystemExit(f"{what} failed (exit {self.returncode}):\n{self.stdout[-3000:]}"
                             f"\n{self.stderr[-3000:]}")
        return self


def timed(argv: Sequence[str], *, env: dict[str, str] | None = None,
          cwd: str | Path | None = None, timeout_s: float = 300, stdin: str | None = None
          ) -> Timed:
    """Run `argv` to its end (`stdin`, if given, is its input); RUSAGE_CHILDREN before/after
    gives its (and its children's) CPU."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    busy = machine_busy_s()
    started = time.monotonic()
    proc = subprocess.run(list(argv), capture_output=True, text=True, env=env, cwd=cwd,
                          timeout=timeout_s, input=stdin)
    wall = time.monotonic() - started
    machine = machine_busy_s() - busy
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return Timed(wall, cpu, proc.returncode, proc.stdout, proc.stderr, machine)


BASELINE = ("a folder holding another version's tfctl/ tree (inventory, remote, tui, examples), "
            "run interleaved with this one as `before`")
"""--baseline's help where the benchmark runs the same commands under both trees."""


def arguments(doc: str, *, reps: int, hosts: int | None = None, grace: bool = False,
              baseline: str | None = None) -> argparse.ArgumentParser:
    """The command line every benchmark has: --reps, and where asked --hosts (a testbed of that
    many), --grace (`tfctl down --grace`) and --baseline (another version's tree, described by
    `baseline`); the benchmark adds its own options."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--reps", type=int, default=reps)
    if hosts is not None:
        parser.add_argument("--hosts", type=int, default=hosts)
    if grace:
        parser.add_argument("--grace", type=float, default=2.0, help="tfctl down --grace")
    if baseline is not None:
        parser.add_argument("--baseline", metavar="DIR", help=baseline)
    return parser


def need_pdsh() -> None:
    if shutil.which("pdsh") is None:
        raise SystemExit("pdsh is not installed (apt-get install -y pdsh)")


@contextlib.contextmanager
def on_a_testbed(hosts: int, prefix: str) -> Iterator[tuple[Path, Testbed, str]]:
    """(a temporary folder, a testbed of `hosts` hosts, a short folder for the holder's socket
    and ssh's control sockets), all removed afterwards."""
    from tests.support.testbed import Testbed

    with (
        tempfile.TemporaryDirectory(prefix=prefix) as tmp,
        Testbed(hosts) as testbed,
        tempfile.TemporaryDirectory(prefix="tfb-", dir="/tmp") as runtime,
    ):
        yield Path(tmp), testbed, runtime


def median(values: Iterable[float]) -> float:
    return statistics.median(list(values))


def ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}" if b > 0 else "n/a"


def tfctl_argv(inventory: Path, *args: str) -> list[str]:
    """The real command line, a fresh process each time, as a user runs it."""
    return [PYTHON, "-m", "tfctl.tui", "-i", str(inventory), *args]


def light_job_dir(parent: Path) -> Path:
    """A job folder with the light job (no TensorFlow) as job.py."""
    folder = parent / "job"
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy(LIGHT_JOB, folder / "job.py")
    return folder


def pids_with_env(key: str, value: str) -> list[int]:
    """Live (non-zombie) processes on this machine whose environment has key=value."""
    from tests.support.leftovers import processes_with_env

    return [p.pid for p in processes_with_env(key, value)]


def wait_until(predicate: Callable[[], bool], timeout_s: float, step_s: float = 0.02) -> float:
    """Seconds until `predicate()` held; raises TimeoutError after `timeout_s`."""
    started = time.monotonic()
    while not predicate():
        if time.monotonic() - started > timeout_s:
            raise TimeoutError(f"not within {timeout_s:g} s")
        time.sleep(step_s)
    return time.monotonic() - started


def kill_tagged(key: str, value: str) -> None:
    """SIGKILL every process tagged key=value and wait until none is left (benchmark cleanup)."""
    for pid in pids_with_env(key, value):
        try:
            os.kill(pid, 9)
        except ProcessLookupError:
            continue
    wait_until(lambda: not pids_with_env(key, value), 10)


def ssh_options(key: Path, known_hosts: Path, user: str) -> list[str]:
    """OpenSSH options matching what tfctl's inventory says for the lab (strict host keys)."""
    return ["-F", "/dev/null", "-i", str(key), "-l", user, "-o", "IdentitiesOnly=yes",
            "-o", "BatchMode=yes", "-o", f"UserKnownHostsFile={known_hosts}",
            "-o", "GlobalKnownHostsFile=/dev/null", "-o", "StrictHostKeyChecking=yes",
            "-o", "LogLevel=ERROR"]


def tree_envs(runtime: str, baseline: str | None) -> dict[str, dict[str, str]]:
    """The environment of each tree a benchmark runs as a user has it (`--persist 60`): "" this
    one, " (before)" `--baseline`'s (first on PYTHONPATH); each holds its connections under a
    runtime folder of its own inside `runtime`, so their holders never lend to each other."""
    trees: dict[str, dict[str, str]] = {}
    for tag, path in (("", None), (" (before)", baseline)):
        if tag and not path:
            continue
        folder = Path(runtime) / (tag.strip(" ()") or "this")
        folder.mkdir(mode=0o700)
        env = dict(os.environ, TFCTL_PERSIST="60", XDG_RUNTIME_DIR=str(folder))
        if path:
            env["PYTHONPATH"] = str(Path(path).resolve())
        trees[tag] = env
    return trees


def holder_pids(runtime: str) -> list[int]:
    """The connection holders (remote/connect/hold) whose socket is under `runtime`."""
    from tests.support.holders import holders

    return holders(Path(runtime))


def proc_cpu_s(stat_line: str, children: bool = False) -> float:
    """utime+stime (and cutime+cstime, its reaped children's, when `children`) of a
    /proc/<pid>/stat line, in seconds."""
    fields = stat_line.rsplit(")", 1)[1].split()
    ticks = int(fields[11]) + int(fields[12])  # utime, stime (fields 14, 15)
    if children:
        ticks += int(fields[13]) + int(fields[14])  # cutime, cstime
    return ticks / os.sysconf("SC_CLK_TCK")


def holder_cpu_s(runtime: str) -> float:
    """CPU (user+sys) so far of the holders under `runtime`: a command that borrows from one
    makes it work, so its CPU counts as the command's."""
    total = 0.0
    for pid in holder_pids(runtime):
        try:
            total += proc_cpu_s(Path(f"/proc/{pid}/stat").read_text())
        except OSError:
            continue
    return total


def stop_holders(runtime: str) -> None:
    for pid in holder_pids(runtime):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)


def light_inventory(testbed: Testbed, path: Path, **job: object) -> Path:
    """The light job as 3 processes per host (ps:0 and 2 CPU workers) in inventory `path`,
    named by its file (cluster.yaml: the default name); `job` replaces keys of the job."""
    spec = {"script": "job.py", "style": "tf_config", "args": ["--forever"], **job}
    name = {} if path.stem == "cluster" else {"name": path.stem}
    return testbed.write_inventory(
        path, spec, host_fields={h: {"cpu_workers": 2} for h in testbed.names}, **name
    )


def timed_tfctl(argv: list[str], env: dict[str, str] | None) -> Timed:
    """`timed`, plus the holder's CPU meanwhile where the command borrows from one."""
    runtime = (env or {}).get("XDG_RUNTIME_DIR") if (env or {}).get("TFCTL_PERSIST") != "0" \
        else None
    before = holder_cpu_s(runtime) if runtime else 0.0
    t = timed(argv, env=env)
    if runtime:
        t = dataclasses.replace(t, cpu_s=t.cpu_s + holder_cpu_s(runtime) - before)
    return t


def run_id_of(output: str) -> str:
    found = re.search(r"^run (\S+) is up", output, re.M)
    if not found:
        raise SystemExit(f"no run id in tfctl's output:\n{output}")
    return found.group(1)


def gone(run_id: str) -> bool:
    return not pids_with_env("TFCTL_RUN_ID", run_id)


@dataclass(frozen=True)
class ProcInfo:
    """One process as /proc shows it: parent, name, CPU (its own; with `reaped`, its reaped
    children's too), network namespace, and whether its environment holds a benchmark's tag."""

    pid: int
    ppid: int
    comm: str
    cpu_s: float
    reaped_s: float
    netns: str
    environ: bytes


def processes() -> dict[int, ProcInfo]:
    """Every process on this machine (the lab hosts are network namespaces of it)."""
    found: dict[int, ProcInfo] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            environ = Path(f"/proc/{entry}/environ").read_bytes()
            netns = os.readlink(f"/proc/{entry}/ns/net")
        except OSError:
            continue
        comm = stat[stat.index("(") + 1:stat.rindex(")")]
        own = proc_cpu_s(stat)
        found[int(entry)] = ProcInfo(int(entry), int(stat.rsplit(")", 1)[1].split()[1]), comm,
                                     own, proc_cpu_s(stat, children=True) - own, netns, environ)
    return found


def host_side_cpu_s(roots: Sequence[int], task_tags: Sequence[bytes] = (b"TFCTL_RUN_ID=",
                                                                         b"BENCH_TAG=")) -> float:
    """CPU (user+sys) so far of the lab hosts' side of a command, tasks left out: every process
    under the hosts' sshd listeners `roots` (sshd, shells, the agent sessions; reaped children
    included, so a session that ended counts through its parent) and every process named in
    SUPERVISION (detached, so no longer under sshd) in the network namespace of one of the
    hosts (not another lab's on the same machine), less the processes whose environment holds
    one of `task_tags` and are not in SUPERVISION (the tasks, tfctl's and the pdsh peers').
    A difference of two calls is what the hosts' side used in between."""
    procs = processes()
    children: dict[int, list[int]] = {}
    for p in procs.values():
        children.setdefault(p.ppid, []).append(p.pid)
    lab = {procs[pid].netns for pid in roots if pid in procs}  # not other labs' on this machine
    counted: set[int] = {p.pid for p in procs.values()
                         if p.comm in SUPERVISION and p.netns in lab}
    todo = list(roots)
    while todo:
        pid = todo.pop()
        counted.add(pid)
        todo += children.get(pid, [])
    total = 0.0
    for pid in counted:
        found = procs.get(pid)
        if found is None:
            continue
        task = found.comm not in SUPERVISION and any(t in found.environ for t in task_tags)
        if not task:
            total += found.cpu_s + found.reaped_s
    return total


def run_processes_per_host(testbed: Testbed) -> dict[str, dict[str, int]]:
    """Per lab host, how many processes of each tfctl name (SUPERVISION, and any other
    `tfctl-*` but the lab's idle sampler) run in its network namespace."""
    procs = processes()
    counts: dict[str, dict[str, int]] = {}
    for name in testbed.names:
        sshd = testbed.sshd_pid(name)
        netns = procs[sshd].netns if sshd in procs else None
        counts[name] = {}
        for p in procs.values():
            if p.netns == netns and p.comm.startswith("tfctl-") and p.comm != "tfctl-lab-idle":
                counts[name][p.comm] = counts[name].get(p.comm, 0) + 1
    return counts


def timed_lab(argv: list[str], env: dict[str, str], gpus: int) -> Timed:
    """One `tfctl lab`, checked to list `gpus` rows; the holder's CPU meanwhile added."""
    runtime = env["XDG_RUNTIME_DIR"] if env.get("TFCTL_PERSIST") != "0" else None
    before = holder_cpu_s(runtime) if runtime else 0.0
    t = timed(argv, env=env).check("lab")
    rows = [line for line in t.stdout.splitlines()
            if [c.strip() for c in line.split("│")][2:3] in (["free"], ["held"])]
    if len(rows) != gpus:
        raise SystemExit(f"lab listed {len(rows)} GPUs, not {gpus}:\n{t.stdout[-3000:]}")
    if runtime:
        t = dataclasses.replace(t, cpu_s=t.cpu_s + holder_cpu_s(runtime) - before)
    return t
