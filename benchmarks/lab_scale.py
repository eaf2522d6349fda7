#!/usr/bin/env python3
"""tfctl at lab scale, side by side with pdsh: `up` (P1), `status` (P5), `down` (P6).

    python benchmarks/lab_scale.py                  # 16 hosts, 3 repetitions (root: netns lab)
    python benchmarks/lab_scale.py --hosts 8 --reps 5 --grace 2
    python benchmarks/lab_scale.py --goals --reps 5 --baseline /work/before   # issue 35's two

A lab of real sshd hosts (tests/support/testbed) runs a light job (tests/support/lightjob.py, no
TensorFlow: it binds its task port and idles) as 3 processes per host: ps:1 and 2 CPU workers. Per
repetition, in a rotating order:
  pdsh       `pdsh -f 32 -R ssh` merely launching the same 3 processes per host, detached, with
             the same key and strict host-key checking (no check that they started);
  up         `tfctl up --no-sync --ps-first`: checks, run dirs, ps first and until they listen,
             then the workers until they listen; every host in parallel;
  up+sync    `tfctl up` with a no-change sync first (the source was synced before the runs),
             every task at once (the default);
  up-all     `tfctl up --no-sync`: every task in one launch, then verified;
  up+setup   the full `up`: no-change sync, a cached `job.setup` (one `true`, its input the
             job's script), all checks, every task at once and verified;
  pdsh-cm    the same pdsh over OpenSSH's kept connections (ControlMaster, ControlPersist),
             warmed first: no handshakes, as tfctl's holder gives;
each `up` kind twice: with no holder (`--persist 0`) and as a user has it by default, a holder
(remote/connect/hold) kept by the previous command lending its agent sessions ("held"; the
holder's CPU meanwhile is counted as the command's), and so for `--baseline`'s tree too ("before",
"before, held": its own holder, under a runtime folder of its own);
after each `up` but up-all and up+setup: `tfctl status` (P5) and `tfctl down --grace G` (P6:
every process of the run must be gone when it returns, and it must return within G + 1 s). Last,
P6 again with tasks that ignore SIGTERM, so `down` has to wait out the grace and SIGKILL them.

`--goals` times only what issue 35's two figures need, each side in the same run: `tfctl up` (a
no-change sync, every task at once, the default) held ÷ pdsh over ControlPersist until its
processes listen (goal ≤ 0.8), and with no holder (`--persist 0`) ÷ `pdsh -f 32` over fresh
connections until they listen (goal ≤ 1.0); each `up` is followed by an untimed `down`.

CPU is user+sys of the tfctl process and everything it waited for (rsync, ssh), from
RUSAGE_CHILDREN, divided by the host count: in this lab every host shares this machine's cores,
so wall time grows with hosts whatever the tool; tfctl's own CPU per host is what limits a LAN.
"machine CPU" is everything the machine did meanwhile (/proc/stat, less this script's own
polling): client, every sshd, agent and task; for pdsh, until all its processes listen.
With `--baseline`, the hosts hold one version's agent at a time (each replaces the other's
program file), so an untimed `tfctl runs` installs a version's agent before its first timed
command: otherwise whichever command follows a switch would pay that install (~30 ms of CPU per
host).

Last, what SSH handshakes cost (what connections that outlive a command save): in
this process, with this tree's own transport, one command (`true`) on every host over fresh
connections, then again over the same connections; and the same for one agent request (a fresh
connection and agent session, then the session again).
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from _common import (
    BASELINE,
    PORTS,
    PYTHON,
    TASKS,
    Timed,
    arguments,
    gone,
    light_inventory,
    light_job_dir,
    machine_line,
    median,
    need_pdsh,
    on_a_testbed,
    ratio,
    run_id_of,
    stop_holders,
    tfctl_argv,
    timed,
    timed_tfctl,
)
from _pdsh import pdsh_envs, pdsh_once

from tests.support.testbed import Testbed

TAGS = ("", " (held)", " (before)", " (before, held)")
"""The trees and ways a contender's `up` runs: this tree with no holder, held, and the same of
`--baseline`'s."""
# The light job, ignoring SIGTERM (so down must SIGKILL it after the grace) and noting when the
# TERM came, in its cwd (the host's workdir), so the time after the TERM can be measured.
STUBBORN = """import os, runpy, signal, time
def noted(*_):
    with open("term-%d.log" % os.getpid(), "a") as log:
        log.write("%r\\n" % time.time())
signal.signal(signal.SIGTERM, noted)
runpy.run_path("job.py", run_name="__main__")
"""


@dataclass
class Samples:
    wall_s: list[float] = field(default_factory=list)
    cpu_s: list[float] = field(default_factory=list)
    machine_s: list[float] = field(default_factory=list)

    def add(self, t: Timed) -> None:
        self.wall_s.append(t.wall_s)
        self.cpu_s.append(t.cpu_s)
        self.machine_s.append(t.machine_cpu_s)


FULL_UP = {"setup": ["true"], "setup_inputs": ["job.py"]}
"""What the full `up` adds to the light job: a cached `job.setup` (one `true`, its input the
job's script)."""


def goals(s: dict[str, Samples], hosts: int) -> None:
    """Issue 35's two figures, each tree's `up` against its peer of the same repetitions."""
    m = {k: median(v.wall_s) for k, v in s.items() if v.wall_s}
    muxed, fresh = m["pdsh-cm+listen"], m["pdsh+listen"]
    print(f"pdsh until its {hosts * len(TASKS)} processes listen: over ControlPersist "
          f"{muxed:.2f} s, over fresh connections (-f 32) {fresh:.2f} s")
    for tree, held_tag, cold_tag in (("this", " (held)", ""),
                                     ("before", " (before, held)", " (before)")):
        held, cold = m.get(f"up+sync{held_tag}"), m.get(f"up+sync{cold_tag}")
        if held is None or cold is None:
            continue
        print(f"GOAL {tree}: held up ÷ pdsh over ControlPersist {ratio(held, muxed)} (goal ≤ "
              f"0.8; {held:.2f} s); cold up (--persist 0) ÷ pdsh -f 32 {ratio(cold, fresh)} "
              f"(goal ≤ 1.0; {cold:.2f} s)")


def describe(pid: int) -> str:
    """What a process left behind is, for the failure message."""
    try:
        status = dict(line.split(":\t", 1) for line in
                      Path(f"/proc/{pid}/status").read_text().splitlines() if ":\t" in line)
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError as exc:
        return f"gone ({exc.strerror})"
    return (f"state {status.get('State')}, ppid {status.get('PPid')}, "
            f"argv {argv[:150]!r}")


def down_watched(inv: Path, grace: float, run_id: str,
                 env: dict[str, str] | None = None) -> tuple[Timed, float]:
    """`tfctl down`, and the wall-clock time (time.time()) when the last process of the run was
    seen gone, polled every 50 ms from this process; down must also have left none."""
    seen: dict[str, float] = {}
    finished = threading.Event()

    def watch() -> None:
        while not finished.is_set():
            if gone(run_id):
                seen["gone"] = time.time()
                return
            time.sleep(0.05)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    down = timed_tfctl(tfctl_argv(inv, "down", "--grace", str(grace)), env)
    if down.returncode != 0:
        for pid in re.findall(r"\d+", " ".join(re.findall(r"pids \[([^\]]*)\]", down.stderr))):
            print(f"left: pid {pid}: {describe(int(pid))}")
    down.check("down")
    finished.set()
    watcher.join()
    if not gone(run_id):
        raise SystemExit(f"down returned but processes of {run_id} remain")
    return down, seen.get("gone", time.time())


def main() -> int:
    parser = arguments(__doc__, reps=3, hosts=16, grace=True, baseline=BASELINE)
    parser.add_argument("--goals", action="store_true",
                        help="only issue 35's two figures: up (held, and with no holder) ÷ pdsh")
    args = parser.parse_args()
    need_pdsh()
    print(machine_line())
    with on_a_testbed(args.hosts, "tfctl-bench-") as (tmp, testbed, runtime):
        args.runtime = runtime  # the holder's socket and ssh's control sockets: short paths
        job = light_job_dir(tmp)
        (job / "stubborn.py").write_text(STUBBORN)
        inv = light_inventory(testbed, job / "cluster.yaml")
        stubborn = light_inventory(testbed, job / "stubborn.yaml", script="stubborn.py")
        full = light_inventory(testbed, job / "full.yaml", **FULL_UP)
        first_sync = timed(tfctl_argv(inv, "sync"), env=dict(os.environ, TFCTL_PERSIST="0")
                           ).check("first sync")  # installs the agent
        print(f"lab: {len(testbed.hosts)} hosts ({'netns' if testbed.isolated else 'loopback'}), "
              f"{len(TASKS)} processes per host; python {PYTHON}"
              + (f"; before = {args.baseline}" if args.baseline else ""))
        samples = measure(testbed, inv, stubborn, full, args)
        samples["first_sync"].add(first_sync)
        if args.goals:
            goals(samples, args.hosts)
        else:
            report(samples, args)
            goals(samples, args.hosts)
            handshakes(inv, args.reps)
        for folder in (runtime, f"{runtime}/b"):
            stop_holders(folder)  # ssh's control masters end with the lab's sshds
    return 0


def measure(testbed: Testbed, inv: Path, stubborn: Path, full: Path, args: argparse.Namespace
            ) -> dict[str, Samples]:
    pdsh_env, muxed_env = pdsh_envs(testbed, args.runtime)
    hosts = ",".join(h.address for h in testbed.hosts)
    s: dict[str, Samples] = defaultdict(Samples)
    # "": this tree with no holder (--persist 0); " (held)": this tree as a user has it
    # (the default --persist 60), the previous command's holder lending its sessions.
    envs: dict[str, dict[str, str] | None] = {
        "": dict(os.environ, TFCTL_PERSIST="0"),
        " (held)": dict(os.environ, TFCTL_PERSIST="60", XDG_RUNTIME_DIR=args.runtime)}
    if args.baseline:
        before = dict(os.environ, PYTHONPATH=str(Path(args.baseline).resolve()))
        envs[" (before)"] = dict(before, TFCTL_PERSIST="0")
        os.makedirs(f"{args.runtime}/b", exist_ok=True)  # its holder's, apart from this tree's
        envs[" (before, held)"] = dict(before, TFCTL_PERSIST="60",
                                       XDG_RUNTIME_DIR=f"{args.runtime}/b")
    for env in envs.values():  # warm-up, not counted (the first also runs the setup)
        for where in (inv,) if args.goals else (inv, full):
            run_id = run_id_of(timed(tfctl_argv(where, "up"), env=env).check("up").stdout)
            down_watched(where, args.grace, run_id, env)
    kinds = ("up+sync",) if args.goals else ("up", "up+sync", "up+setup")
    contenders = ["pdsh", "pdsh-cm"] + ([] if args.goals else ["up-all"]) + [
        f"{kind}{tag}" for tag in envs for kind in kinds]
    installed = "before" if args.baseline else "this"  # whose agent the hosts hold
    for rep in range(args.reps):
        for name in contenders[rep % len(contenders):] + contenders[:rep % len(contenders)]:
            if name.startswith("pdsh"):
                muxed = name == "pdsh-cm"
                launched, listening, machine = pdsh_once(testbed, muxed_env if muxed else pdsh_env,
                                                         hosts, TASKS, PORTS)
                s[name].add(launched)
                s[f"{name}+listen"].wall_s.append(listening)
                s[f"{name}+listen"].machine_s.append(machine)
                continue
            tag = name[name.index(" "):] if " " in name else ""
            env = envs[tag]
            tree = "before" if "before" in tag else "this"
            if tree != installed and "held" not in tag:  # untimed: this version's agent
                timed(tfctl_argv(inv, "runs"), env=env).check("runs")  # installed, as hosts
            installed = tree  # have it (a held command may install its own for a new session)
            kind = name.split(" ")[0]
            flags = {"up": ["--no-sync", "--ps-first"], "up-all": ["--no-sync"]}.get(kind, [])
            which = full if kind == "up+setup" else inv
            up = timed_tfctl(tfctl_argv(which, "up", *flags), env)
            s[name].add(up.check(name))
            run_id = run_id_of(up.stdout)
            if kind in ("up-all", "up+setup") or args.goals:  # `up` alone; status, down alike
                down_watched(which, args.grace, run_id, env)
                continue
            s["status" + tag].add(timed_tfctl(tfctl_argv(inv, "status"), env).check("status"))
            started = time.time()
            down, gone_at = down_watched(inv, args.grace, run_id, env)
            s["down" + tag].add(down)
            s["gone" + tag].wall_s.append(gone_at - started)
        print(f"  rep {rep + 1}: " + ", ".join(f"{k} {s[k].wall_s[-1]:.2f} s"
                                               for k in contenders), flush=True)
    for _ in range(max(1, args.reps // 2)):
        run_id = run_id_of(timed(tfctl_argv(stubborn, "up", "--no-sync"), env=envs[""])
                           .check("up").stdout)
        for old in testbed.dir.glob("*/work/term-*.log"):
            old.unlink()
        started = time.time()
        down, gone_at = down_watched(stubborn, args.grace, run_id, envs[""])
        terms = [float(line) for log in testbed.dir.glob("*/work/term-*.log")
                 for line in log.read_text().split()]
        s["down_stubborn"].add(down)
        s["gone_stubborn"].wall_s.append(gone_at - started)
        s["after_term"].wall_s.append(gone_at - min(terms))
    return s


def report(s: dict[str, Samples], args: argparse.Namespace) -> None:
    hosts = args.hosts
    m = {k: (median(v.wall_s), median(v.cpu_s or [0.0])) for k, v in s.items() if v.wall_s}
    busy = {k: median(v.machine_s) for k, v in s.items() if v.machine_s}
    print(f"medians of {args.reps} interleaved repetitions, {hosts} hosts × {len(TASKS)} "
          "processes:")
    print(f"{'what':<36}{'wall s':>8}{'CPU s':>8}{'CPU/host s':>12}{'machine CPU s':>15}")
    rows = [("pdsh -f 32 (launch only)", "pdsh"),
            ("pdsh, until all ports listen", "pdsh+listen"),
            ("pdsh, ControlPersist, launch only", "pdsh-cm"),
            ("pdsh, ControlPersist, until listening", "pdsh-cm+listen")]
    for tag in TAGS:
        rows += [("tfctl up --no-sync --all-at-once", "up-all")] if not tag else []
        rows += [(f"tfctl up --no-sync --ps-first{tag}", f"up{tag}"),
                 (f"tfctl up, no-change sync{tag}", f"up+sync{tag}"),
                 (f"tfctl up, sync + cached setup{tag}", f"up+setup{tag}"),
                 (f"tfctl status{tag}", f"status{tag}"),
                 (f"tfctl down --grace {args.grace:g}{tag}", f"down{tag}")]
    rows += [(f"tfctl down --grace {args.grace:g}, no TERM", "down_stubborn"),
             ("first tfctl sync (agent + files)", "first_sync")]
    for label, key in rows:
        machine = f"{busy[key]:>15.2f}" if key in busy else ""
        if key.endswith("+listen"):
            print(f"{label:<36}{m[key][0]:>8.2f}{'':>20}{machine}")
        elif key in m:
            wall, cpu = m[key]
            print(f"{label:<36}{wall:>8.2f}{cpu:>8.2f}{cpu / hosts:>12.3f}{machine}")
    pdsh, listen = m["pdsh"][0], m["pdsh+listen"][0]
    muxed = m["pdsh-cm+listen"][0]
    for tag in [t for t in TAGS if f"up{tag}" in m]:
        up, synced = m[f"up{tag}"], m[f"up+sync{tag}"]
        whole = m[f"up+setup{tag}"]
        print(f"P1{tag} GOAL full up (no-change sync, cached setup, all checks, until every "
              f"task listens) ÷ pdsh until its processes listen: {ratio(whole[0], listen)} "
              f"(goal ≤ 1.0); without a setup: {ratio(synced[0], listen)}; --no-sync "
              f"--ps-first: {ratio(up[0], listen)}; ÷ pdsh over ControlPersist until "
              f"listening: {ratio(whole[0], muxed)}")
        print(f"P1{tag} up --no-sync --ps-first ÷ pdsh launch only: {ratio(up[0], pdsh)}; up "
              f"with no-change sync ÷ pdsh launch only: {ratio(synced[0], pdsh)}")
        if not tag:
            print(f"P1 up --no-sync --all-at-once ÷ pdsh: {ratio(m['up-all'][0], pdsh)}; ÷ pdsh "
                  f"until its processes listen: {ratio(m['up-all'][0], listen)}")
        print(f"P1{tag} tfctl CPU per host: up {up[1] / hosts:.3f} s, up+sync "
              f"{synced[1] / hosts:.3f} s, full up {whole[1] / hosts:.3f} s (goal ≤ 0.1 s)")
        print(f"P1{tag} the machine's CPU for the whole job (client, sshd, agents, tasks): up "
              f"{busy[f'up{tag}']:.2f} s ÷ pdsh until listening {busy['pdsh+listen']:.2f} s = "
              f"{ratio(busy[f'up{tag}'], busy['pdsh+listen'])}")
        print(f"P5{tag} status: {m[f'status{tag}'][0]:.2f} s (goal ≤ 1 s)")
    for tag, other in ((" (held)", ""), ("", " (before)"), (" (held)", " (before)"),
                       (" (held)", " (before, held)")):
        if f"up{tag}" in m and f"up{other}" in m:
            print(f"{tag.strip(' ()') or 'no holder'} ÷ {other.strip(' ()') or 'no holder'}: "
                  + ", ".join(f"{k} {ratio(m[k + tag][0], m[k + other][0])}"
                              for k in ("up", "up+sync", "up+setup", "status", "down")))
    limit = args.grace + 1
    worst = max(s["after_term"].wall_s)
    print(f"P6 down --grace {args.grace:g}: all processes gone (watched from outside) "
          f"{m['gone'][0]:.2f} s after down started; tasks ignoring SIGTERM: "
          f"{m['gone_stubborn'][0]:.2f} s after down started, {m['after_term'][0]:.2f} s after "
          f"the first SIGTERM (worst {worst:.2f} s; goal ≤ grace + 1 = {limit:g} s: "
          f"{'met' if worst <= limit else 'NOT met'}); down returned after "
          f"{m['down'][0]:.2f} / {m['down_stubborn'][0]:.2f} s, none left every time")


def handshakes(inv: Path, reps: int) -> None:
    """What a fresh connection costs against one kept open: per host, wall and this process's
    CPU (the client's side only), for a shell command and for an agent request."""
    import resource

    from tfctl.inventory.load import load_inventory
    from tfctl.remote.connect.fleet import Fleet
    from tfctl.remote.connect.session import agentops

    inventory = load_inventory(inv)
    hosts = len(inventory.hosts)
    rows: dict[str, list[tuple[float, float]]] = defaultdict(list)

    def clocked(name: str, step: object) -> None:
        before = resource.getrusage(resource.RUSAGE_SELF)
        started = time.monotonic()
        result = fleet.map(step)  # type: ignore[arg-type]
        wall = time.monotonic() - started
        after = resource.getrusage(resource.RUSAGE_SELF)
        if result.failed:
            raise SystemExit(f"{name}: {next(iter(result.failed.values()))}")
        rows[name].append((wall, (after.ru_utime - before.ru_utime)
                           + (after.ru_stime - before.ru_stime)))

    for _ in range(reps):
        for kind, step in (("command", lambda t: t.run("true", timeout_s=30)),
                           ("agent request", lambda t: agentops.runs(t, t.host.workdir))):
            with Fleet(inventory) as fleet:
                clocked(f"{kind}, fresh connection", step)
                clocked(f"{kind}, same connection", step)
    print(f"SSH handshakes, {hosts} hosts in parallel, medians of {reps} (client CPU is this "
          "process's: the hosts' sshd and shells are not in it):")
    for name, values in rows.items():
        wall, cpu = median(v[0] for v in values), median(v[1] for v in values)
        print(f"  {name:<36}{wall:>8.3f} s wall{cpu / hosts:>10.4f} s client CPU per host")


if __name__ == "__main__":
    sys.exit(main())
