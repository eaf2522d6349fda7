#!/usr/bin/env python3
"""`tfctl lab` beside `tfctl status` on N lab hosts: one agent request per host each.

    python benchmarks/lab_view.py                  # 16 hosts, 4 stand-in GPUs each, 5 reps

Each host holds a run (the light job: a ps and two workers, one on GPU 0) and a second user's
claim is not needed: `lab` reads every host's GPUs, compute apps, their processes and the
claims folder in its one request, `status` the run's tasks in its one. Every command is a fresh
process with held connections (`--persist 60`, remote/connect/hold), typed one after another,
in alternating order; `cold` is the first command after `tfctl disconnect`. Prints medians of
wall-clock seconds and lab ÷ status. Needs root (network-namespace lab hosts,
tests/support/testbed).
"""

from __future__ import annotations

import os
import sys
import time
from collections import defaultdict

from _common import (
    PYTHON,
    arguments,
    light_job_dir,
    machine_line,
    median,
    on_a_testbed,
    ratio,
    tfctl_argv,
    timed,
)
from lab_scale import run_id_of


def main() -> int:
    parser = arguments(__doc__, reps=5, hosts=16)
    parser.add_argument("--gpus", type=int, default=4)
    args = parser.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("needs root: the network-namespace testbed")
    print(machine_line())
    with on_a_testbed(args.hosts, "tfctl-labview-") as (tmp, testbed, runtime):
        for name in testbed.names:
            testbed.install_gpus(name, args.gpus)
        job = light_job_dir(tmp)
        spec = {"script": "job.py", "style": "tf_config", "args": ["--forever"]}
        inv = testbed.write_inventory(job / "cluster.yaml", spec,
                                  gpus={h: [0, 1] for h in testbed.names})
        env = dict(os.environ, TFCTL_PERSIST="60", XDG_RUNTIME_DIR=runtime)
        run_id = run_id_of(timed(tfctl_argv(inv, "up"), env=env).check("up").stdout)
        print(f"lab: {len(testbed.hosts)} hosts, {args.gpus} GPUs each, run {run_id}; python "
              f"{PYTHON}")
        try:
            timed(tfctl_argv(inv, "lab"), env=env).check("lab")  # starts the idle samplers
            s: dict[str, list[float]] = defaultdict(list)
            for rep in range(args.reps):
                timed(tfctl_argv(inv, "disconnect"), env=env).check("disconnect")
                time.sleep(0.5)
                first, second = ("lab", "status") if rep % 2 else ("status", "lab")
                s[f"{first} cold"].append(timed(tfctl_argv(inv, first), env=env)
                                          .check(first).wall_s)
                for name in (second, first, second):
                    s[f"{name} warm"].append(timed(tfctl_argv(inv, name), env=env)
                                             .check(name).wall_s)
            for key in sorted(s):
                print(f"{key:12s} median {median(s[key]):.3f} s  ({len(s[key])} runs)")
            print(f"lab ÷ status, warm: {ratio(median(s['lab warm']), median(s['status warm']))}")
        finally:
            timed(tfctl_argv(inv, "down", "--grace", "1"), env=env)
            timed(tfctl_argv(inv, "disconnect"), env=env)
    return 0


if __name__ == "__main__":
    sys.exit(main())
