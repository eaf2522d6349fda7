"""The figure benchmarks (fig_*.py): one figure each, tfctl against a pdsh peer doing the same.

Every figure runs on a lab of N real sshd hosts (network namespaces of this machine,
tests/support/testbed), its contenders interleaved (the order rotates every repetition), and
prints the medians, the ratio tfctl ÷ its peer, and beside it the host-side CPU seconds
(`_common.host_side_cpu_s`: every host's sshd, shells and agent sessions, and a run's
detached supervision processes, tfctl-supervise / tfctl-watch / tfctl-keeper; the tasks
themselves left out) per task started (`up`) or per host (`lab`). With `--baseline DIR` another
tree's tfctl runs interleaved as "before" (its own holder; an untimed command installs a
tree's agent on the hosts after a switch, as lab_scale.py does). Needs root and pdsh.
"""

from __future__ import annotations

import argparse
import os
import secrets
import statistics
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

from _common import (
    BASELINE,
    PORTS,
    PYTHON,
    TASKS,
    Timed,
    arguments,
    gone,
    host_side_cpu_s,
    light_inventory,
    light_job_dir,
    machine_line,
    median,
    need_pdsh,
    on_a_testbed,
    ratio,
    run_id_of,
    run_processes_per_host,
    stop_holders,
    tfctl_argv,
    timed,
    timed_lab,
    timed_tfctl,
    tree_envs,
    wait_until,
)
from _pdsh import all_listening, by_hand, pdsh_argv, pdsh_envs, start_and_wait_command, stop_peer


@dataclass
class Sample:
    """One contender's repetitions: wall, the client's CPU (with its holder's), the hosts'."""

    wall_s: list[float] = field(default_factory=list)
    client_cpu_s: list[float] = field(default_factory=list)
    host_cpu_s: list[float] = field(default_factory=list)

    def add(self, t: Timed, host_cpu_s: float) -> None:
        self.wall_s.append(t.wall_s)
        self.client_cpu_s.append(t.cpu_s)
        self.host_cpu_s.append(host_cpu_s)


def with_host_cpu(run: Callable[[], Timed], roots: list[int]) -> tuple[Timed, float]:
    """`run()`, and the host-side CPU it cost (`host_side_cpu_s` before and after)."""
    before = host_side_cpu_s(roots)
    t = run()
    return t, host_side_cpu_s(roots) - before


def checked(argv: list[str], env: dict[str, str], what: str) -> Timed:
    """`timed_tfctl` (a holder's CPU counted too), failing the benchmark if the command did."""
    return timed_tfctl(argv, env).check(what)


def figure_arguments(doc: str, reps: int) -> argparse.Namespace:
    parser = arguments(doc, reps=reps, hosts=16, baseline=BASELINE)
    parser.add_argument("--no-sync", action="store_true",
                        help="up: `tfctl up --no-sync` (the peer syncs nothing either)")
    parser.add_argument("--gpus", type=int, default=4, help="lab: stand-in GPUs per host")
    args = parser.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("needs root: the network-namespace testbed")
    need_pdsh()
    return args


def rotated(order: list[str], rep: int) -> list[str]:
    return order[rep % len(order):] + order[:rep % len(order)]


def tree_env(env: dict[str, str], held: bool) -> dict[str, str]:
    """A tree's environment held (its holder lends its sessions) or cold (`--persist 0`)."""
    return env if held else dict(env, TFCTL_PERSIST="0")


def down(inv: Path, env: dict[str, str], run_id: str) -> None:
    timed(tfctl_argv(inv, "down", "--grace", "2"), env=env).check("down")
    wait_until(lambda: gone(run_id), 10)


def report(s: dict[str, Sample], peer: str, figure: str, goal: str, per: int, per_what: str
           ) -> None:
    """The medians, and each tree's ratio to the peer with the host-side CPU beside it."""
    reps = len(s[peer].wall_s)
    print(f"medians of {reps} interleaved repetitions (client CPU: the command and what it "
          "waited for, and its holder's; host CPU: every host's sshd, shells, agent sessions "
          f"and the run's tfctl-supervise/-watch/-keeper, tasks left out; per {per_what}: ÷ "
          f"{per}):")
    print(f"{'':28}{'wall s':>8}{'spread':>14}{'client CPU s':>14}{'host CPU s':>12}"
          f"{'/' + per_what:>12}")
    for key, v in s.items():
        spread = f"{min(v.wall_s):.2f}–{max(v.wall_s):.2f}"
        host = median(v.host_cpu_s)
        print(f"{key:28}{median(v.wall_s):8.2f}{spread:>14}{median(v.client_cpu_s):14.3f}"
              f"{host:12.3f}{host / per:12.4f}")
    peer_wall, peer_host = median(s[peer].wall_s), median(s[peer].host_cpu_s)
    for key in s:
        if key == peer:
            continue
        wall, host = median(s[key].wall_s), median(s[key].host_cpu_s)
        per_rep = [a / b for a, b in zip(s[key].wall_s, s[peer].wall_s, strict=True)]
        print(f"FIGURE {figure}, {key}: {ratio(wall, peer_wall)} (goal {goal}; {wall:.2f} s ÷ "
              f"{peer_wall:.2f} s; per repetition median {statistics.median(per_rep):.2f}); "
              f"host-side CPU per {per_what} {host / per:.4f} s, the peer's "
              f"{peer_host / per:.4f} s")
    keys = [k for k in s if k != peer]
    if len(keys) == 2:
        print(f"this ÷ before: {ratio(median(s[keys[0]].wall_s), median(s[keys[1]].wall_s))}")


def up_figure(doc: str, held: bool) -> int:
    """`tfctl up` of the light job, held or cold, ÷ pdsh starting the same and waiting on each
    host until its ports listen (over ControlPersist, or fresh connections with -f 32)."""
    args = figure_arguments(doc, reps=3)
    print(machine_line())
    with on_a_testbed(args.hosts, "tfctl-fig-") as (tmp, testbed, runtime):
        inv = light_inventory(testbed, light_job_dir(tmp) / "cluster.yaml")
        trees = {f"tfctl{tag}": tree_env(env, held)
                 for tag, env in tree_envs(runtime, args.baseline).items()}
        plain, muxed = pdsh_envs(testbed, runtime)
        peer_env = muxed if held else plain
        peer = "pdsh over ControlPersist" if held else "pdsh -f 32, fresh connections"
        roots = [pid for pid in (testbed.sshd_pid(h) for h in testbed.names) if pid]
        flags = ["--no-sync"] if args.no_sync else []
        tasks = len(TASKS) * len(testbed.hosts)
        timed(tfctl_argv(inv, "sync"), env=dict(os.environ, TFCTL_PERSIST="0")).check("sync")
        print(f"lab: {len(testbed.hosts)} hosts, {tasks} light tasks; tfctl up {' '.join(flags)}"
              f"{'held' if held else '--persist 0'}; python {PYTHON}"
              + (f"; before = {args.baseline}" if args.baseline else ""))
        print("peer, per host: " + start_and_wait_command(testbed.python, "TAG", TASKS, PORTS))
        for env in trees.values():  # warm-up, not counted: the agent, the holder
            up = timed(tfctl_argv(inv, "up", *flags), env=env).check("up")
            down(inv, env, run_id_of(up.stdout))
        s: dict[str, Sample] = defaultdict(Sample)
        installed = list(trees)[-1]
        for rep in range(args.reps):
            for name in rotated([peer, *trees], rep):
                if name == peer:
                    tag = secrets.token_hex(4)
                    argv = pdsh_argv(testbed, start_and_wait_command(testbed.python, tag, TASKS,
                                                                     PORTS))
                    t, host = with_host_cpu(partial(checked, argv, peer_env, "pdsh"), roots)
                    if not all_listening(testbed, PORTS):
                        raise SystemExit("pdsh returned before every port listened")
                    s[name].add(t, host)
                    stop_peer(testbed, tag, PORTS)
                    continue
                env = trees[name]
                if name != installed and not held:  # untimed: this tree's agent installed
                    timed(tfctl_argv(inv, "runs"), env=env).check("runs")
                installed = name
                t, host = with_host_cpu(
                    partial(checked, tfctl_argv(inv, "up", *flags), env, "up"), roots)
                s[name].add(t, host)
                down(inv, env, run_id_of(t.stdout))
            print(f"  rep {rep + 1}: " + ", ".join(f"{k} {v.wall_s[-1]:.2f} s"
                                                   for k, v in s.items()), flush=True)
        what = "held up ÷ pdsh over ControlPersist, until every task listens" if held else \
            "cold up (--persist 0) ÷ pdsh -f 32, until every task listens"
        report(s, peer, what, "≤ 0.6" if held else "≤ 1.0", tasks, "task")
        for env in trees.values():
            stop_holders(env["XDG_RUNTIME_DIR"])
    return 0


def lab_queries() -> str:
    """What tfctl's agent asks on each host for `tfctl lab`, by hand: nvidia-smi's two
    selective queries side by side (lab.py's fields) and the process list."""
    from tfctl.remote.agent.lab import APP_QUERY, GPU_QUERY

    fmt = "--format=csv,noheader,nounits"
    return (f"nvidia-smi --query-gpu={GPU_QUERY} {fmt} & "
            f"nvidia-smi --query-compute-apps={APP_QUERY} {fmt} & "
            "ps -eo pid,user,pgid,lstart,args; wait")


def lab_figure(doc: str, held: bool) -> int:
    """`tfctl lab`, held or cold, ÷ pdsh making the same queries on every host."""
    args = figure_arguments(doc, reps=5)
    print(machine_line())
    with on_a_testbed(args.hosts, "tfctl-fig-") as (tmp, testbed, runtime):
        for name in testbed.names:
            testbed.install_gpus(name, args.gpus)
        spec = {"script": "job.py", "style": "tf_config", "args": ["--forever"]}
        inv = testbed.write_inventory(light_job_dir(tmp) / "cluster.yaml", spec,
                                      gpus={h: [0, 1] for h in testbed.names})
        base = tree_envs(runtime, args.baseline)
        trees = {f"tfctl lab{tag}": tree_env(env, held) for tag, env in base.items()}
        run_id = run_id_of(timed(tfctl_argv(inv, "up"), env=base[""]).check("up").stdout)
        plain, muxed = pdsh_envs(testbed, runtime)
        peer_env = muxed if held else plain
        peer = "pdsh over ControlPersist" if held else "pdsh -f 32, fresh connections"
        argv = pdsh_argv(testbed, lab_queries())
        roots = [pid for pid in (testbed.sshd_pid(h) for h in testbed.names) if pid]
        hosts, total = len(testbed.hosts), args.gpus * len(testbed.hosts)
        print(f"lab: {hosts} hosts, {args.gpus} stand-in GPUs each, a run on GPUs 0-1 of each "
              f"({run_id}); tfctl lab {'held' if held else '--persist 0'}; python {PYTHON}"
              + (f"; before = {args.baseline}" if args.baseline else ""))
        print(f"peer, per host: {lab_queries()}")
        try:
            for env in trees.values():  # warm-up, not counted: the agent, idle samplers, holder
                timed_lab(tfctl_argv(inv, "lab"), env, total)
            s: dict[str, Sample] = defaultdict(Sample)
            installed = list(trees)[-1]
            for rep in range(args.reps):
                for name in rotated([peer, *trees], rep):
                    if name == peer:
                        s[name].add(*with_host_cpu(
                            partial(by_hand, argv, peer_env, hosts, args.gpus), roots))
                        continue
                    env = trees[name]
                    if name != installed and not held:  # untimed: this tree's agent installed
                        timed_lab(tfctl_argv(inv, "lab"), env, total)
                    installed = name
                    s[name].add(*with_host_cpu(
                        partial(timed_lab, tfctl_argv(inv, "lab"), env, total), roots))
                print(f"  rep {rep + 1}: " + ", ".join(f"{k} {v.wall_s[-1]:.2f} s"
                                                       for k, v in s.items()), flush=True)
            what = (f"{'held' if held else 'cold'} lab, {hosts} hosts × {args.gpus} GPUs ÷ "
                    f"{peer} running the same queries")
            report(s, peer, what, "≤ 0.4" if held else "≤ 1.0", hosts, "host")
        finally:
            timed(tfctl_argv(inv, "down", "--grace", "1"), env=base[""])
            for env in base.values():
                timed(tfctl_argv(inv, "disconnect"), env=env)
                stop_holders(env["XDG_RUNTIME_DIR"])
    return 0


def host_processes_figure(doc: str) -> int:
    """After `tfctl up` of the light job (held, as a user has it), each host's processes of the
    run that are not its tasks, by name."""
    args = figure_arguments(doc, reps=1)
    print(machine_line())
    with on_a_testbed(args.hosts, "tfctl-fig-") as (tmp, testbed, runtime):
        inv = light_inventory(testbed, light_job_dir(tmp) / "cluster.yaml")
        trees = {f"tfctl{tag}": env for tag, env in tree_envs(runtime, args.baseline).items()}
        print(f"lab: {len(testbed.hosts)} hosts × {len(TASKS)} light tasks; counted: processes "
              "in each host's network namespace named tfctl-* (/proc/<pid>/comm), but the lab's "
              "idle sampler (tfctl-lab-idle, not a run's)")
        worst: dict[str, int] = {}
        for rep in range(args.reps):
            for name, env in trees.items():
                up = timed(tfctl_argv(inv, "up"), env=env).check("up")
                time.sleep(0.5)  # what `up` left, settled: a process started late counts too
                counts = run_processes_per_host(testbed)
                down(inv, env, run_id_of(up.stdout))
                per_host = sorted(sum(c.values()) for c in counts.values())
                names: dict[str, list[int]] = defaultdict(list)
                for c in counts.values():
                    for comm, n in c.items():
                        names[comm].append(n)
                worst[name] = max(worst.get(name, 0), per_host[-1])
                print(f"  rep {rep + 1}, {name}: per host {per_host[0]}–{per_host[-1]} "
                      "(" + ", ".join(f"{comm} {min(n)}–{max(n)}" for comm, n in names.items())
                      + ")", flush=True)
        for name, most in worst.items():
            print(f"FIGURE a run's processes on a host besides its tasks, {name}: {most} at most "
                  f"(goal 1)")
        for env in trees.values():
            stop_holders(env["XDG_RUNTIME_DIR"])
    return 0

