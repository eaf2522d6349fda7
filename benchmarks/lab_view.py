#!/usr/bin/env python3
"""`tfctl lab` beside pdsh asking every host the same by hand, on N lab hosts.

    python benchmarks/lab_view.py                  # 16 hosts, 4 stand-in GPUs each, 5 reps
    python benchmarks/lab_view.py --reps 7 --baseline /tmp/before

Each host has 4 stand-in GPUs (tests/support/fakes/nvidia_smi_standin.py, seen by every user)
and holds a run (the light job: a ps and two workers, on GPUs 0 and 1). Per repetition, in a
rotating order:

  pdsh       `pdsh -f 32 -R ssh` running on every host what a person types to see the same:
             nvidia-smi's GPUs, its compute apps (two calls: a driver answers one selective
             query per call) and a process list (`ps`), with the lab's key and strict host-key
             checking;
  pdsh-cm    the same over OpenSSH's kept connections (ControlMaster, ControlPersist), warmed
             first: no handshakes, as tfctl's holder gives;
  lab        `tfctl --persist 0 lab`: cold, nothing kept (its own connections, an agent started
             per host, the claims read, the table drawn);
  lab first  `tfctl lab` as a user has it by default (`--persist 60`) after `tfctl disconnect`:
             the first command of the day, whose holder (remote/connect/hold) connects while
             the command starts;
  lab held   the same again at once: the previous command's holder lends its agent sessions;
             the holder's CPU meanwhile is counted as the command's (in `lab first` too).

With `--baseline DIR`, another version's `lab` and `lab held` run interleaved as "before", with
a holder of its own; the hosts hold one version's agent at a time, so an untimed `lab` installs
a version's agent before its first timed command after a switch. Every `lab` must list every
GPU of every host. Prints medians of wall-clock seconds and CPU (the command and what it waited
for; for pdsh its 16 ssh clients), and lab ÷ pdsh per tree, all from the same repetitions.
Needs root (network-namespace lab hosts, tests/support/testbed) and pdsh.
"""

from __future__ import annotations

import dataclasses
import os
import shlex
import sys
from collections import defaultdict
from collections.abc import Callable
from functools import partial
from pathlib import Path

from _common import (
    BASELINE,
    PYTHON,
    Timed,
    arguments,
    holder_pids,
    light_job_dir,
    machine_line,
    median,
    need_pdsh,
    on_a_testbed,
    proc_cpu_s,
    ratio,
    run_id_of,
    stop_holders,
    tfctl_argv,
    timed,
    timed_lab,
    tree_envs,
    wait_until,
)
from _pdsh import by_hand, pdsh_envs

# What a person types on each host to see what `tfctl lab` shows (the fields lab.py reads).
BY_HAND = "; ".join([
    "nvidia-smi --query-gpu=index,uuid,memory.used,memory.total,utilization.gpu,power.draw,name "
    "--format=csv,noheader,nounits",
    "nvidia-smi --query-compute-apps=gpu_uuid,pid,used_memory --format=csv,noheader,nounits",
    "ps -eo pid,user,pgid,lstart,args",
])


def hosts_cpu_s(roots: list[int]) -> float:
    """CPU (user+sys) the lab hosts' sshd listeners `roots` and everything under them used so
    far: each live process's own and its reaped children's, so each second counts once."""
    children: dict[int, list[int]] = defaultdict(list)
    cpu_s: dict[int, float] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            children[int(stat.rsplit(")", 1)[1].split()[1])].append(int(entry))  # its ppid
            cpu_s[int(entry)] = proc_cpu_s(stat, children=True)
    total, todo = 0.0, list(roots)
    while todo:
        pid = todo.pop()
        total += cpu_s.get(pid, 0.0)
        todo += children.get(pid, [])
    return total


def counted(run: Callable[[], Timed], roots: list[int]) -> Timed:
    """`run()`, its `machine_cpu_s` replaced by what it and the hosts used (the hosts' CPU is
    what their sshd, shells, agents and nvidia-smi used meanwhile; a neighbour's load on this
    machine is not in it)."""
    before = hosts_cpu_s(roots)
    t = run()
    return dataclasses.replace(t, machine_cpu_s=t.cpu_s + hosts_cpu_s(roots) - before)


def disconnect(inv: Path, env: dict[str, str]) -> None:
    """Nothing kept: the holder closed, its agent sessions ended (waited for)."""
    timed(tfctl_argv(inv, "disconnect"), env=env).check("disconnect")
    stop_holders(env["XDG_RUNTIME_DIR"])  # one still starting, were there any
    wait_until(lambda: not holder_pids(env["XDG_RUNTIME_DIR"]), 10)


def main() -> int:
    parser = arguments(__doc__, reps=5, hosts=16, baseline=BASELINE)
    parser.add_argument("--gpus", type=int, default=4, help="stand-in GPUs per host")
    args = parser.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("needs root: the network-namespace testbed")
    need_pdsh()
    print(machine_line())
    with on_a_testbed(args.hosts, "tfctl-labview-") as (tmp, testbed, runtime):
        for name in testbed.names:
            testbed.install_gpus(name, args.gpus)
        job = light_job_dir(tmp)
        spec = {"script": "job.py", "style": "tf_config", "args": ["--forever"]}
        inv = testbed.write_inventory(job / "cluster.yaml", spec,
                                      gpus={h: [0, 1] for h in testbed.names})
        trees = tree_envs(runtime, args.baseline)
        this = trees[""]
        run_id = run_id_of(timed(tfctl_argv(inv, "up"), env=this).check("up").stdout)
        plain, muxed = pdsh_envs(testbed, runtime)
        pdsh = ["pdsh", "-f", "32", "-R", "ssh", "-l", testbed.user, "-w",
                ",".join(h.address for h in testbed.hosts), BY_HAND]
        total = args.gpus * len(testbed.hosts)
        roots = [pid for pid in (testbed.sshd_pid(h) for h in testbed.names) if pid]
        print(f"lab: {len(testbed.hosts)} hosts, {args.gpus} GPUs each, run {run_id}; python "
              f"{PYTHON}" + (f"; before = {args.baseline}" if args.baseline else ""))
        print(f"by hand, per host: {shlex.quote(BY_HAND)}")
        try:
            for env in trees.values():  # warm-up, not counted: the agent, the idle samplers
                timed_lab(tfctl_argv(inv, "lab"), env, total)
            s: dict[str, list[Timed]] = defaultdict(list)
            order = ["pdsh", "pdsh-cm", *trees]
            installed = list(trees)[-1]
            for rep in range(args.reps):
                for name in order[rep % len(order):] + order[:rep % len(order)]:
                    if name.startswith("pdsh"):
                        e = muxed if name == "pdsh-cm" else plain
                        s[name].append(counted(partial(by_hand, pdsh, e, len(testbed.hosts),
                                                       args.gpus), roots))
                        continue
                    env = trees[name]
                    cold = dict(env, TFCTL_PERSIST="0")
                    if name != installed:  # untimed: this tree's agent installed on the hosts
                        timed_lab(tfctl_argv(inv, "lab"), cold, total)
                        installed = name
                    kinds = ["lab", "lab first", "lab held"]
                    for kind in kinds if rep % 2 else kinds[1:] + kinds[:1]:
                        if kind == "lab first":  # untimed: nothing kept
                            disconnect(inv, env)
                        e = cold if kind == "lab" else env
                        s[kind + name].append(counted(partial(timed_lab, tfctl_argv(inv, "lab"),
                                                              e, total), roots))
                print(f"  rep {rep + 1}: " + ", ".join(f"{k} {v[-1].wall_s:.2f} s"
                                                       for k, v in s.items()), flush=True)
            report(s, list(trees))
        finally:
            timed(tfctl_argv(inv, "down", "--grace", "1"), env=this)
            for env in trees.values():
                timed(tfctl_argv(inv, "disconnect"), env=env)
                stop_holders(env["XDG_RUNTIME_DIR"])
    return 0


def report(s: dict[str, list[Timed]], tags: list[str]) -> None:
    wall = {k: median(t.wall_s for t in v) for k, v in s.items()}
    cpu = {k: median(t.cpu_s for t in v) for k, v in s.items()}
    every = {k: median(t.machine_cpu_s for t in v) for k, v in s.items()}
    print(f"{'':22s}{'wall s':>8s}{'cpu s':>8s}{'+hosts':>8s}   (medians of {len(s['pdsh'])};"
          " cpu: the command and what it waited for, and its holder; +hosts: and every host's"
          " sshd, shell, agent and nvidia-smi meanwhile)")
    for key in s:
        print(f"{key:22s}{wall[key]:8.3f}{cpu[key]:8.3f}{every[key]:8.3f}")
    for tag in tags:
        print(f"cold lab ÷ pdsh{tag}: {ratio(wall['lab' + tag], wall['pdsh'])} (goal ≤ 1.0); "
              f"first lab ÷ pdsh{tag}: {ratio(wall['lab first' + tag], wall['pdsh'])}; "
              f"held lab ÷ pdsh{tag}: {ratio(wall['lab held' + tag], wall['pdsh'])} (goal ≤ 0.5);"
              f" held lab ÷ pdsh-cm{tag}: {ratio(wall['lab held' + tag], wall['pdsh-cm'])}")
        print(f"  CPU with the hosts', lab ÷ pdsh{tag}: cold "
              f"{ratio(every['lab' + tag], every['pdsh'])}, first "
              f"{ratio(every['lab first' + tag], every['pdsh'])}, held "
              f"{ratio(every['lab held' + tag], every['pdsh'])}")
    if len(tags) > 1:
        for kind in ("lab", "lab first", "lab held"):
            print(f"{kind}, this ÷ before: {ratio(wall[kind], wall[kind + tags[1]])}")


if __name__ == "__main__":
    sys.exit(main())
