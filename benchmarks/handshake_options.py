#!/usr/bin/env python3
"""Where a cold connection to N lab hosts spends its time, and what each way of opening them buys.

    python benchmarks/handshake_options.py                 # 16 hosts, 5 reps, every contender
    python benchmarks/handshake_options.py --reps 3 --only threads,procs4

Each contender is a fresh process (as a cold command is) that, once tfctl is imported, opens an
SSH connection to every host of the lab and makes one agent request there (`runs`: the agent
started on a new session, as a cold `tfctl lab` does), then closes them. Its connect window
(first TCP connect to last answer) is timed, with per host and phase: `build` (the Fabric
Connection and the known-hosts lookup), `tcp`, `banner`, `kex` (key exchange to NEWKEYS),
`hostkey` (the server key checked against known_hosts), `auth` (public-key auth: the key signs),
`session` (session channel opened, exec request answered) and `agent` (the agent's first
answer). CPU is the process's (user+sys, every thread: getrusage) and each thread's own
(`/proc/self/task/*/stat`) over the window; `machine` is every core's busy time meanwhile
(the lab's sshd and agents share this machine's cores). The GIL's share is read as
process CPU ÷ wall: one interpreter can run Python on one core at a time.

Contenders (interleaved, rotating order, medians):

  threads      what tfctl does today: one thread per host in one interpreter (fleet.map)
  procsK       the hosts split over K forked worker processes, each with one thread per host
               of its share, each running the whole per-host step and returning its result
  kex-nist     threads, ecdh-sha2-nistp256 offered just ahead of curve25519 (paramiko's own
               order, which tfctl keeps, has X25519 first: OpenSSH's sshd before 9.9 agrees
               on it; the post-quantum mlkem768x25519 stays first)
  kex-dh14     threads, diffie-hellman-group14-sha256 (a finite-field exchange) only
  pdsh         `pdsh -f 32 -R ssh HOST true`: 16 OpenSSH clients, for scale
  lab          `tfctl --persist 0 lab` (the whole cold command) and pdsh running the same
               queries by hand (benchmarks/lab_view.py's BY_HAND), for the ratio

Needs root (network-namespace lab hosts, tests/support/testbed) and pdsh.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from _common import (
    BASELINE,
    PYTHON,
    arguments,
    light_job_dir,
    machine_busy_s,
    machine_line,
    median,
    need_pdsh,
    on_a_testbed,
    ratio,
    tfctl_argv,
    timed,
)

PHASES = ("build", "tcp", "banner", "kex", "hostkey", "auth", "session", "agent")
CONTENDERS = ("threads", "procs2", "procs4", "kex-nist", "kex-dh14", "pdsh", "lab", "pdsh-lab")


# ------------------------------------------------------------------------- the child's side

class Clock:
    """Phase marks per host, from whichever thread reaches them (caller or paramiko's)."""

    def __init__(self) -> None:
        self.t0 = time.monotonic()
        self.marks: dict[str, dict[str, float]] = defaultdict(dict)
        self.host_of: dict[int, str] = {}  # id(socket or Transport) -> host name
        self.lock = threading.Lock()
        self.caller_cpu: list[float] = []  # each host's calling thread's CPU at its answer
        self.transport_tids: list[int] = []  # each paramiko Transport thread's

    def mark(self, host: str | None, name: str) -> None:
        if host is not None:
            with self.lock:
                self.marks[host].setdefault(name, time.monotonic() - self.t0)


def p256_first(offered: tuple[str, ...]) -> tuple[str, ...]:
    """paramiko's key exchanges with ecdh-sha2-nistp256 moved just ahead of curve25519."""
    order = [k for k in offered if k != "ecdh-sha2-nistp256"]
    order.insert(order.index("curve25519-sha256@libssh.org"), "ecdh-sha2-nistp256")
    return tuple(order)


def instrument(clock: Clock) -> None:
    """Wrap the points where each phase ends (paramiko, Fabric and tfctl, no behaviour changed)."""
    from tfctl.remote.connect import connection, ssh
    from tfctl.remote.connect._paramiko import paramiko

    def host_of_transport(t: Any) -> str | None:
        return clock.host_of.get(id(getattr(t, "sock", None)))

    original_init = connection.HostConnection.__init__

    def init(self: Any, host: Any, *a: Any, **k: Any) -> None:
        clock.mark(host.name, "start")
        original_init(self, host, *a, **k)
        clock.mark(host.name, "build")
    connection.HostConnection.__init__ = init  # type: ignore[method-assign]

    original_open = connection.HostConnection.open_checked

    def open_checked(self: Any) -> None:
        original_open(self)
        clock.mark(self.tfctl_target[0].name, "auth")
    connection.HostConnection.open_checked = open_checked  # type: ignore[method-assign]

    original_tcp = connection.tcp_connect

    def tcp(hostname: str, port: int, timeout_s: float) -> Any:
        sock = original_tcp(hostname, port, timeout_s)
        name = by_address.get((hostname, port), hostname)
        clock.host_of[id(sock)] = name
        clock.mark(name, "tcp")
        return sock
    connection.tcp_connect = tcp  # type: ignore[assignment]

    original_banner = paramiko.Transport._check_banner

    def banner(self: Any) -> None:
        original_banner(self)
        clock.mark(host_of_transport(self), "banner")
    paramiko.Transport._check_banner = banner  # type: ignore[method-assign]

    original_start = paramiko.Transport.start_client

    def start_client(self: Any, *a: Any, **k: Any) -> None:
        original_start(self, *a, **k)
        clock.mark(host_of_transport(self), "kex")
    paramiko.Transport.start_client = start_client  # type: ignore[method-assign]

    original_auth = paramiko.SSHClient._auth

    def auth(self: Any, *a: Any, **k: Any) -> None:
        clock.mark(host_of_transport(self._transport), "hostkey")
        original_auth(self, *a, **k)
    paramiko.SSHClient._auth = auth  # type: ignore[method-assign]

    original_run = paramiko.Transport.run

    def run(self: Any) -> None:
        with clock.lock:
            clock.transport_tids.append(threading.get_native_id())
        profiled(original_run, self)
    paramiko.Transport.run = run  # type: ignore[method-assign]

    original_pipe = ssh.SshTransport.open_pipe

    def open_pipe(self: Any, command: str) -> Any:
        pipe = original_pipe(self, command)
        clock.mark(self.host.name, "session")
        return pipe
    ssh.SshTransport.open_pipe = open_pipe  # type: ignore[method-assign]


by_address: dict[tuple[str, int], str] = {}
profiles: list[Any] = []


def profiled(function: Any, *args: Any) -> Any:
    """`function(*args)`, under cProfile in this thread when HANDSHAKE_PROFILE is set."""
    if not os.environ.get("HANDSHAKE_PROFILE"):
        return function(*args)
    import cProfile

    profile = cProfile.Profile(time.thread_time)  # CPU of this thread, not wall
    try:
        return profile.runcall(function, *args)
    finally:
        profiles.append(profile)


def print_profile() -> None:
    """Every profiled thread's CPU, merged: the functions that cost most, to stderr."""
    import pstats

    stats = pstats.Stats(profiles[0], stream=sys.stderr)
    for profile in profiles[1:]:
        stats.add(profile)
    stats.sort_stats("tottime").print_stats(35)
    stats.sort_stats("cumulative").print_stats(45)


def on_cpu_s(tid: int) -> float:
    """CPU time of thread `tid` of this process so far (schedstat: nanoseconds)."""
    try:
        return int(Path(f"/proc/self/task/{tid}/schedstat").read_text().split()[0]) / 1e9
    except (OSError, ValueError, IndexError):
        return 0.0


def one_share(inventory: Any, names: list[str], clock: Clock) -> dict[str, Any]:
    """Connect to `names` (one thread each), one agent request each; phases and CPU."""
    from tfctl.remote.connect.fleet import Fleet
    from tfctl.remote.connect.session import agentops

    def step(t: Any) -> int:
        records = profiled(agentops.runs, t, t.host.workdir)
        clock.mark(t.host.name, "agent")
        with clock.lock:
            clock.caller_cpu.append(time.thread_time())
        return len(records)

    cpu0 = resource.getrusage(resource.RUSAGE_SELF)
    start = time.monotonic()
    with Fleet(inventory) as fleet:
        result = fleet.map(step, names)
        wall = time.monotonic() - start
        cpu1 = resource.getrusage(resource.RUSAGE_SELF)
        transports_s = sum(on_cpu_s(tid) for tid in clock.transport_tids)
    if result.failed:
        raise SystemExit(f"{next(iter(result.failed.values()))}")
    return {"wall_s": wall,
            "cpu_s": (cpu1.ru_utime - cpu0.ru_utime) + (cpu1.ru_stime - cpu0.ru_stime),
            "caller_cpu_s": sum(clock.caller_cpu), "transport_cpu_s": transports_s,
            "marks": dict(clock.marks)}


def child(mode: str, inv: str) -> None:
    """One contender's run, its figures printed as one JSON line."""
    from tfctl.inventory.load import load_inventory
    from tfctl.remote.connect import ssh  # noqa: F401  (Fabric and paramiko imported first)
    from tfctl.remote.connect._paramiko import paramiko

    inventory = load_inventory(Path(inv))
    for h in inventory.hosts:
        by_address[(h.address, h.port)] = h.name
    if mode == "kex-nist":
        paramiko.Transport._preferred_kex = p256_first(paramiko.Transport._preferred_kex)
    elif mode == "kex-dh14":
        paramiko.Transport._preferred_kex = ("diffie-hellman-group14-sha256",)  # type: ignore[misc]
    names = [h.name for h in inventory.hosts]
    busy = all_busy_s()
    clock = Clock()
    instrument(clock)
    if not mode.startswith("procs"):
        out = one_share(inventory, names, clock)
    else:
        workers = int(mode[5:])
        shares = [names[i::workers] for i in range(workers)]
        pipes = []
        start = time.monotonic()
        for share in shares:
            read, write = os.pipe()
            if os.fork() == 0:
                os.close(read)
                try:
                    data = json.dumps(one_share(inventory, share, clock)).encode()
                    with os.fdopen(write, "wb") as w:
                        w.write(data)
                finally:
                    os._exit(0)
            os.close(write)
            pipes.append(read)
        parts = []
        for read in pipes:
            with os.fdopen(read, "rb") as r:
                parts.append(json.loads(r.read()))
        for _ in shares:
            os.wait()
        wall = time.monotonic() - start
        children = resource.getrusage(resource.RUSAGE_CHILDREN)
        marks: dict[str, Any] = {}
        for part in parts:
            marks.update(part["marks"])
        out = {"wall_s": wall, "cpu_s": children.ru_utime + children.ru_stime,
               "caller_cpu_s": sum(p["caller_cpu_s"] for p in parts),
               "transport_cpu_s": sum(p["transport_cpu_s"] for p in parts), "marks": marks}
    out["machine_s"] = all_busy_s() - busy
    if profiles:
        print_profile()
    print(json.dumps(out))


def all_busy_s() -> float:
    """CPU seconds every core has been busy since boot (/proc/stat), this process's included."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    return machine_busy_s() + own.ru_utime + own.ru_stime


# ------------------------------------------------------------------------ the parent's side

def run_child(mode: str, inv: Path, env: dict[str, str]) -> dict[str, Any]:
    proc = subprocess.run([PYTHON, __file__, "--child", mode.removesuffix("-before"), str(inv)],
                          capture_output=True, text=True, timeout=120, env=env)
    if proc.returncode != 0:
        raise SystemExit(f"{mode}: {proc.stderr[-3000:]}")
    return json.loads(proc.stdout.splitlines()[-1])


def phase_table(runs: list[dict[str, Any]]) -> dict[str, float]:
    """Per phase, the median over runs of the median host's duration (ms)."""
    per: dict[str, list[float]] = defaultdict(list)
    for run in runs:
        durations: dict[str, list[float]] = defaultdict(list)
        for marks in run["marks"].values():
            prev = marks["start"]
            for phase in PHASES:
                if phase in marks:
                    durations[phase].append(1000 * (marks[phase] - prev))
                    prev = marks[phase]
        for phase, values in durations.items():
            per[phase].append(median(values))
    return {p: median(v) for p, v in per.items()}


def main() -> int:
    parser = arguments(__doc__, reps=5, hosts=16, baseline=BASELINE)
    parser.add_argument("--only", help="comma-separated contenders (default: all)")
    parser.add_argument("--child", nargs=2, help=argparse_hidden())
    parser.add_argument("--kex-cpu", type=int, metavar="N",
                        help="instead: N connections one after another to one host per key "
                             "exchange (X25519, paramiko's first with this sshd, and P-256), "
                             "alternating; the host's sshd CPU per connection")
    parser.add_argument("--profile", metavar="MODE",
                        help="one run of MODE with every thread under cProfile (CPU time), "
                             "the costliest functions printed")
    args = parser.parse_args()
    if args.child:
        child(*args.child)
        return 0
    if os.geteuid() != 0:
        raise SystemExit("needs root: the network-namespace testbed")
    need_pdsh()
    chosen = args.only.split(",") if args.only else list(CONTENDERS)
    if args.baseline:  # the same, under the other tree
        chosen += [f"{m}-before" for m in chosen if m in ("threads", "lab")]
    print(machine_line())
    from _pdsh import pdsh_envs
    from lab_view import BY_HAND

    with on_a_testbed(args.hosts, "tfctl-handshake-") as (tmp, testbed, runtime):
        job = light_job_dir(tmp)
        spec = {"script": "job.py", "style": "tf_config"}
        inv = testbed.write_inventory(job / "cluster.yaml", spec)
        cold = dict(os.environ, TFCTL_PERSIST="0", XDG_RUNTIME_DIR=runtime)
        before = dict(cold, PYTHONPATH=str(Path(args.baseline).resolve())) if args.baseline \
            else cold
        timed(tfctl_argv(inv, "lab"), env=cold).check("lab")  # the agent installed, untimed
        plain, _ = pdsh_envs(testbed, runtime)
        hosts = ",".join(h.address for h in testbed.hosts)
        pdsh = ["pdsh", "-f", "32", "-R", "ssh", "-l", testbed.user, "-w", hosts]
        runs: dict[str, list[dict[str, Any]]] = defaultdict(list)
        if args.kex_cpu:
            kex_cpu(testbed, inv, args.kex_cpu, args.reps)
            return 0
        if args.profile:
            env = dict(os.environ, HANDSHAKE_PROFILE="1")
            proc = subprocess.run([PYTHON, __file__, "--child", args.profile, str(inv)],
                                  capture_output=True, text=True, timeout=300, env=env)
            print(proc.stderr)
            return 0
        for rep in range(args.reps):
            for mode in chosen[rep % len(chosen):] + chosen[:rep % len(chosen)]:
                env = before if mode.endswith("-before") else cold
                if mode in ("pdsh", "pdsh-lab", "lab", "lab-before"):
                    argv = (tfctl_argv(inv, "lab") if mode.startswith("lab") else
                            [*pdsh, BY_HAND if mode == "pdsh-lab" else "true"])
                    t = timed(argv, env=plain if mode.startswith("pdsh") else env).check(mode)
                    runs[mode].append({"wall_s": t.wall_s, "cpu_s": t.cpu_s,
                                       "machine_s": t.machine_cpu_s})
                else:
                    runs[mode].append(run_child(mode, inv, env))
            print(f"  rep {rep + 1}: " + ", ".join(f"{k} {v[-1]['wall_s']:.3f}"
                                                   for k, v in runs.items()), flush=True)
        report(runs, args.hosts)
    return 0


def kex_cpu(testbed: Any, inv: Path, n: int, rounds: int) -> None:
    """The CPU one connection (handshake, auth, close) costs the host's sshd (everything the
    listener has reaped: /proc/PID/stat cutime+cstime) and this client, per key exchange."""
    from tfctl.inventory.load import load_inventory
    from tfctl.remote.connect._paramiko import paramiko
    from tfctl.remote.connect.ssh import SshTransport

    host = load_inventory(inv).hosts[0]
    listener = testbed.sshd_pid(host.name)
    tick = os.sysconf("SC_CLK_TCK")

    def reaped_s() -> float:
        fields = Path(f"/proc/{listener}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[13]) + int(fields[14])) / tick

    ours = paramiko.Transport._preferred_kex
    orders = {"x25519 (paramiko's)": ours, "p256 first": p256_first(ours)}
    sshd: dict[str, list[float]] = defaultdict(list)
    client: dict[str, list[float]] = defaultdict(list)
    for _ in range(rounds):
        for name, order in orders.items():
            paramiko.Transport._preferred_kex = order  # type: ignore[misc]
            before, own = reaped_s(), resource.getrusage(resource.RUSAGE_SELF)
            for _ in range(n):
                transport = SshTransport(host)
                transport.connection()
                transport.close()
            time.sleep(0.3)  # the last connection's sshd reaped
            after = resource.getrusage(resource.RUSAGE_SELF)
            sshd[name].append(1000 * (reaped_s() - before) / n)
            client[name].append(1000 * ((after.ru_utime - own.ru_utime)
                                        + (after.ru_stime - own.ru_stime)) / n)
    paramiko.Transport._preferred_kex = ours  # type: ignore[misc]
    print(f"CPU per connection to one host, ms (median of {rounds} rounds of {n}; sshd: its "
          "listener's reaped children, ~10 ms clock ticks spread over the round):")
    for name in orders:
        print(f"  {name:20s} sshd {median(sshd[name]):6.1f}   client {median(client[name]):6.1f}"
              f"   (rounds: {', '.join(f'{v:.1f}' for v in sshd[name])})")


def argparse_hidden() -> str:
    import argparse

    return argparse.SUPPRESS


def report(runs: dict[str, list[dict[str, Any]]], hosts: int) -> None:
    print(f"medians of {len(next(iter(runs.values())))}; wall and CPU in ms; cpu: the client "
          "process (all its threads, for procsK its workers); machine: every core's busy time "
          "meanwhile (the hosts' sshd and agents too)")
    print(f"{'':10s}{'wall':>8s}{'cpu':>8s}{'cpu/wall':>9s}{'machine':>9s}{'callers':>8s}"
          f"{'paramiko':>9s}"
          "   per host phase (median host): " + " ".join(PHASES))
    for mode, values in runs.items():
        wall = median(v["wall_s"] for v in values)
        cpu = median(v["cpu_s"] for v in values)
        machine = median(v["machine_s"] for v in values)
        callers = median(v.get("caller_cpu_s", 0) for v in values)
        transports = median(v.get("transport_cpu_s", 0) for v in values)
        phases = phase_table(values) if "marks" in values[0] else {}
        print(f"{mode:10s}{1000 * wall:8.0f}{1000 * cpu:8.0f}{cpu / wall:9.2f}"
              f"{1000 * machine:9.0f}{1000 * callers:8.0f}{1000 * transports:9.0f}   "
              + " ".join(f"{phases.get(p, 0):.0f}" for p in PHASES))
    if "threads" in runs and "marks" in runs["threads"][0]:
        run = runs["threads"][len(runs["threads"]) // 2]
        firsts = sorted(m.get("auth", 0) for m in run["marks"].values())
        print(f"threads, one run: authenticated at {', '.join(f'{1000 * t:.0f}' for t in firsts)}"
              " ms")
    walls = {mode: median(v["wall_s"] for v in values) for mode, values in runs.items()}
    for lab in ("lab", "lab-before"):
        if lab in walls and "pdsh-lab" in walls:
            print(f"cold {lab} ÷ pdsh (same queries): {ratio(walls[lab], walls['pdsh-lab'])}")
    if "threads" in runs:
        base = median(v["wall_s"] for v in runs["threads"])
        print(", ".join(f"{mode} {ratio(median(v['wall_s'] for v in values), base)}"
                        for mode, values in runs.items() if mode != "threads")
              + f" (÷ threads' wall, {hosts} hosts)")


if __name__ == "__main__":
    sys.exit(main())
