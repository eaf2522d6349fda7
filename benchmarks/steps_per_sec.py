#!/usr/bin/env python3
"""The example trainer's steps/s launched by `tfctl up` vs by hand with the same command (P4).

    python benchmarks/steps_per_sec.py                # 3 interleaved runs each, 3000 steps
    python benchmarks/steps_per_sec.py --reps 5 --steps 4000

One CPU host with `transport: local` (this machine, no sshd), `ps: 0`, one worker, style
tf_config: the task gets a TF_CONFIG naming one worker, so examples/train.py runs
MultiWorkerMirroredStrategy with one worker. "By hand" runs the exact argv, environment (that
TF_CONFIG included) and working directory `tfctl plan --json` gives for that task, with its
output going to a file as tfctl's does; "by hand, single" drops TF_CONFIG (the plain
single-process style), to show what the strategy itself costs. A run's rate is the median of its
`steps_per_sec=` log windows after the first (tracing, warm-up); the figure is the median over
runs, alternated tfctl / by hand / single.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import PYTHON, ROOT, arguments, machine_line, median, ratio, tfctl_argv, timed

RATE = re.compile(r"steps_per_sec=([\d.]+)")


def window_rate(log: str) -> float:
    rates = [float(x) for x in RATE.findall(log)]
    if len(rates) < 3:
        raise SystemExit(f"too few log windows to judge a rate:\n{log[-2000:]}")
    return median(rates[1:])


def write_inventory(folder: Path, steps: int, log_every: int) -> Path:
    inv = folder / "cluster.yaml"
    inv.write_text(
        "name: p4\n"
        f"defaults: {{python: {PYTHON}, workdir: {folder}}}\n"
        "hosts:\n"
        "  - {name: here, address: 127.0.0.1, transport: local, gpus: 0, ps: 0}\n"
        "job:\n"
        "  script: train.py\n"
        f"  args: [--steps={steps}, --log_every={log_every}, --checkpoint_every={steps},"
        " --train_dir=out-tfctl]\n"
        "  style: tf_config\n"
        "  sync: false\n")
    return inv


def by_tfctl(inv: Path) -> float:
    up = timed(tfctl_argv(inv, "up", "--wait"), timeout_s=600).check("tfctl up --wait")
    run_id = re.search(r"^run (\S+) is up", up.stdout, re.M)
    if run_id is None:
        raise SystemExit(f"no run id:\n{up.stdout}")
    log = inv.parent / ".tfctl" / "runs" / run_id.group(1) / "worker-0.log"
    return window_rate(log.read_text())


def by_hand(task: dict[str, Any], folder: Path, single: bool) -> float:
    env = {**os.environ, **{str(k): str(v) for k, v in task["env"].items()}}
    if single:
        env.pop("TF_CONFIG", None)
    argv = [str(a).replace("out-tfctl", "out-hand") for a in task["argv"]]
    out = folder / f"hand-{time.monotonic_ns()}.log"
    with open(out, "w") as log:
        code = subprocess.run(argv, env=env, cwd=str(task["cwd"]), stdout=log,
                              stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                              timeout=600).returncode
    if code != 0:
        raise SystemExit(f"by hand: exit {code}\n{out.read_text()[-2000:]}")
    return window_rate(out.read_text())


def main() -> int:
    parser = arguments(__doc__, reps=3)
    parser.add_argument("--steps", type=int, default=3000)
    parser.add_argument("--log-every", type=int, default=250)
    args = parser.parse_args()
    print(machine_line())
    with tempfile.TemporaryDirectory(prefix="tfctl-bench-") as tmp:
        folder = Path(tmp)
        for name in ("train.py", "digits.py"):
            shutil.copy(ROOT / "examples" / name, folder / name)
        inv = write_inventory(folder, args.steps, args.log_every)
        plan = json.loads(timed(tfctl_argv(inv, "plan", "--json")).check("plan").stdout)
        (task,) = plan["tasks"]
        print(f"task {task['name']}: {' '.join(task['argv'])}; TF_CONFIG="
              f"{task['env'].get('TF_CONFIG')}")
        rates: dict[str, list[float]] = {"tfctl": [], "by hand": [], "by hand, single": []}
        for rep in range(args.reps):
            order = list(rates)
            for name in order[rep % 3:] + order[:rep % 3]:
                rate = (by_tfctl(inv) if name == "tfctl" else
                        by_hand(task, folder, single=name == "by hand, single"))
                rates[name].append(rate)
            print(f"  rep {rep + 1}: " + ", ".join(f"{k} {v[-1]:.1f}" for k, v in rates.items()),
                  flush=True)
    m = {k: median(v) for k, v in rates.items()}
    print(f"medians of {args.reps} runs each, steps/s (log windows after the first):")
    for name, rate in m.items():
        print(f"  {name:<18}{rate:>8.1f}")
    print(f"P4 tfctl ÷ by hand (same TF_CONFIG): {ratio(m['tfctl'], m['by hand'])} (goal ≥ 0.98);"
          f" MultiWorkerMirrored(1) ÷ single: {ratio(m['by hand'], m['by hand, single'])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
