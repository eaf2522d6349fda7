#!/usr/bin/env python3
"""How long `tfctl up` takes to start a real TensorFlow job: ps first vs `--all-at-once`.

    python benchmarks/tf_start.py                 # 1 lab host: 1 ps + 1 worker, 3 repetitions
    python benchmarks/tf_start.py --hosts 2 --reps 5

The bundled trainer (examples/train.py, style flags) on lab hosts (tests/lab, real sshd), synced
once before the runs. Per repetition, interleaved (order alternating): `tfctl up --no-sync`
(parameter servers first and until they listen, then the workers until they listen) and
`tfctl up --no-sync --all-at-once` (every task in one launch, then each verified listening),
each followed by `tfctl down`. Importing TensorFlow takes a task seconds of one core, so with
ps first a job starts in two imports one after the other; all at once, in one, where the cores
are free: every lab host shares this machine's cores, so with more tasks than cores the imports
queue for CPU either way (1 host = 2 tasks on this 2-core machine).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

from _common import ROOT, machine_line, median, ratio, tfctl_argv, timed

from tests.lab import Lab

EXAMPLES = ROOT / "examples"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=1)
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()
    print(machine_line())
    with tempfile.TemporaryDirectory(prefix="tfctl-bench-") as tmp, Lab(args.hosts) as lab:
        job_dir = Path(tmp) / "job"
        job_dir.mkdir()
        for name in ("train.py", "evaluate.py", "digits.py"):
            shutil.copy(EXAMPLES / name, job_dir / name)
        job = {"script": "train.py", "style": "flags", "args": ["--steps=100000"]}
        inv = lab.write_inventory(job_dir / "cluster.yaml", job)
        timed(tfctl_argv(inv, "sync")).check("sync")
        modes = {"ps first": ["--no-sync"], "all at once": ["--no-sync", "--all-at-once"]}
        walls: dict[str, list[float]] = {m: [] for m in modes}
        for rep in range(args.reps):
            order = list(modes) if rep % 2 == 0 else list(reversed(modes))
            for mode in order:
                up = timed(tfctl_argv(inv, "up", *modes[mode])).check(f"up ({mode})")
                walls[mode].append(up.wall_s)
                timed(tfctl_argv(inv, "down", "--grace", "1")).check("down")
            print(f"  rep {rep + 1}: " + ", ".join(f"{m} {walls[m][-1]:.2f} s" for m in modes),
                  flush=True)
    first, together = median(walls["ps first"]), median(walls["all at once"])
    print(f"real TensorFlow, {args.hosts} host(s) × (1 ps + 1 worker), medians of {args.reps}: "
          f"up {first:.2f} s, up --all-at-once {together:.2f} s, ratio {ratio(together, first)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
