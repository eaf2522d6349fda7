#!/usr/bin/env python3
"""The command typed right after another: is it ever slower than the first?

    python benchmarks/back_to_back.py                 # 16 hosts, 5 repetitions (root: netns lab)
    python benchmarks/back_to_back.py --reps 3 --gap 0.2 --baseline /tmp/before

Users type `tfctl up` and then `status` or `logs -f` at once. Each tfctl command is a fresh
process with the default `--persist 60` (connections kept by a holder, remote/connect/hold),
as a user runs it. Per repetition, in a rotating order of trees (this one, and `--baseline`'s):

  cold up      `tfctl disconnect` (nothing kept), then the full `up` (no-change sync, cached
               `job.setup`, every check, every task at once and verified): the first command;
  status +gap  `status`, GAP seconds after `up` returned: the command typed right after;
  status warm  `status` again, GAP seconds later (what a command costs when nothing is left
               to wait for);
  cold status  `tfctl disconnect`, then `status` of the same run: a first command again;
  status 2nd   `status`, GAP seconds after it;
  then `down` (untimed);

and pdsh once (`pdsh -f 32 -R ssh` launching the same processes, benchmarks/_pdsh.py): cold
`up` ÷ pdsh is printed beside the back-to-back ratios, taken in the same repetitions. The
holder's CPU during a command is counted as that command's, as lab_scale.py does.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import defaultdict
from pathlib import Path

from _common import (
    BASELINE,
    PYTHON,
    arguments,
    holder_pids,
    light_job_dir,
    machine_line,
    median,
    need_pdsh,
    on_a_testbed,
    ratio,
    stop_holders,
    tfctl_argv,
    timed,
    tree_envs,
    wait_until,
)
from _pdsh import pdsh_envs, pdsh_once
from lab_scale import (
    FULL_UP,
    PORTS,
    TASKS,
    down_watched,
    light_inventory,
    run_id_of,
    timed_tfctl,
)


def disconnect(env: dict[str, str]) -> None:
    """Nothing kept: the holder closed, its agent sessions ended (waited for)."""
    timed([PYTHON, "-m", "tfctl.tui", "disconnect"], env=env).check("disconnect")
    stop_holders(env["XDG_RUNTIME_DIR"])  # one still starting, were there any
    wait_until(lambda: not holder_pids(env["XDG_RUNTIME_DIR"]), 10)


def one_rep(inv: Path, full: Path, env: dict[str, str], gap_s: float, grace: float,
            s: dict[str, list[float]], tag: str) -> None:
    disconnect(env)
    up = timed_tfctl(tfctl_argv(full, "up"), env).check("cold up")
    time.sleep(gap_s)
    after_up = timed_tfctl(tfctl_argv(inv, "status"), env).check("status after up")
    time.sleep(gap_s)
    warm = timed_tfctl(tfctl_argv(inv, "status"), env).check("warm status")
    disconnect(env)
    cold = timed_tfctl(tfctl_argv(inv, "status"), env).check("cold status")
    time.sleep(gap_s)
    second = timed_tfctl(tfctl_argv(inv, "status"), env).check("second status")
    down_watched(inv, grace, run_id_of(up.stdout), env)
    for key, t in (("up", up), ("status after up", after_up), ("status warm", warm),
                   ("status cold", cold), ("status 2nd", second)):
        s[key + tag].append(t.wall_s)
        s[key + tag + " cpu"].append(t.cpu_s)
    s["2nd ÷ cold" + tag].append(second.wall_s / cold.wall_s)
    s["after up ÷ cold" + tag].append(after_up.wall_s / cold.wall_s)
    s["after up ÷ warm" + tag].append(after_up.wall_s / warm.wall_s)


def main() -> int:
    parser = arguments(__doc__, reps=5, hosts=16, grace=True, baseline=BASELINE)
    parser.add_argument("--gap", type=float, default=0.2,
                        help="seconds between one command's end and the next one's start")
    args = parser.parse_args()
    need_pdsh()
    print(machine_line())
    with on_a_testbed(args.hosts, "tfctl-b2b-") as (tmp, testbed, runtime):
        job = light_job_dir(tmp)
        inv = light_inventory(testbed, job / "cluster.yaml")
        full = light_inventory(testbed, job / "full.yaml", **FULL_UP)
        trees = tree_envs(runtime, args.baseline)
        plain, _ = pdsh_envs(testbed, runtime)
        hosts = ",".join(h.address for h in testbed.hosts)
        print(f"lab: {len(testbed.hosts)} hosts ({'netns' if testbed.isolated else 'loopback'}), "
              f"{len(TASKS)} processes per host; gap {args.gap:g} s; python {PYTHON}"
              + (f"; before = {args.baseline}" if args.baseline else ""))
        for env in trees.values():  # warm-up, not counted: the first sync and setup
            run_id = run_id_of(timed(tfctl_argv(full, "up"), env=env).check("up").stdout)
            down_watched(full, args.grace, run_id, env)
        s: dict[str, list[float]] = defaultdict(list)
        order = ["pdsh", *trees]
        for rep in range(args.reps):
            for name in order[rep % len(order):] + order[:rep % len(order)]:
                if name == "pdsh":
                    launched, listening, _ = pdsh_once(testbed, plain, hosts, TASKS, PORTS)
                    s["pdsh"].append(launched.wall_s)
                    s["pdsh+listen"].append(listening)
                    continue
                if len(trees) > 1:  # untimed: that tree's agent installed on the hosts
                    for env in trees.values():
                        disconnect(env)
                    timed(tfctl_argv(inv, "runs"), env=dict(trees[name], TFCTL_PERSIST="0"))
                one_rep(inv, full, trees[name], args.gap, args.grace, s, name)
            print(f"  rep {rep + 1}: " + ", ".join(
                f"{k} {v[-1]:.2f}" for k, v in s.items() if not k.endswith(" cpu")), flush=True)
        for env in trees.values():
            disconnect(env)
        report(s, trees, args)
    return 0


def report(s: dict[str, list[float]], trees: dict[str, dict[str, str]],
           args: argparse.Namespace) -> None:
    print(f"medians of {args.reps} interleaved repetitions, {args.hosts} hosts × {len(TASKS)} "
          f"processes, each command {args.gap:g} s after the previous one's end:")
    pdsh, listen = median(s["pdsh"]), median(s["pdsh+listen"])
    print(f"  pdsh -f 32 launch only {pdsh:.2f} s; until every process listens {listen:.2f} s")
    for tag in trees:
        m = {k: median(s[k + tag]) for k in ("up", "status after up", "status warm",
                                             "status cold", "status 2nd")}
        cpu = {k: median(s[k + tag + " cpu"]) for k in ("up", "status cold", "status 2nd")}
        each = ", ".join(f"{x:.2f}" for x in s["2nd ÷ cold" + tag])
        after = ", ".join(f"{x:.2f}" for x in s["after up ÷ cold" + tag])
        name = tag.strip(" ()") or "this tree"
        print(f"{name}:")
        print(f"  cold up {m['up']:.2f} s (CPU {cpu['up']:.2f} s); status {args.gap:g} s "
              f"after it {m['status after up']:.2f} s; again {m['status warm']:.2f} s")
        print(f"  cold status {m['status cold']:.2f} s (CPU {cpu['status cold']:.2f} s); "
              f"status {args.gap:g} s after it {m['status 2nd']:.2f} s "
              f"(CPU {cpu['status 2nd']:.2f} s)")
        print(f"  GOAL second command ÷ first (≤ 1.0): status after status "
              f"{ratio(m['status 2nd'], m['status cold'])} (each rep: {each}); status after "
              f"up ÷ cold status {ratio(m['status after up'], m['status cold'])} (each rep: "
              f"{after}); worst {max(s['2nd ÷ cold' + tag] + s['after up ÷ cold' + tag]):.2f}")
        print(f"  status {args.gap:g} s after up ÷ the same status once more (what it still "
              f"waited for): {ratio(m['status after up'], m['status warm'])} (each rep: "
              + ", ".join(f"{x:.2f}" for x in s["after up ÷ warm" + tag]) + ")")
        print(f"  cold full up ÷ pdsh until its processes listen "
              f"{ratio(m['up'], listen)}; ÷ pdsh launch only {ratio(m['up'], pdsh)}")


if __name__ == "__main__":
    sys.exit(main())
