#!/usr/bin/env python3
"""What a Slurm run costs over a lab run: `tfctl up --on slurm` vs `tfctl up`, to the first step.

    python benchmarks/slurm_start.py              # 2 lab hosts, 3 repetitions (root: needs
    python benchmarks/slurm_start.py --reps 5     # the namespace lab and slurm-wlm + munge)
    python benchmarks/slurm_start.py --light      # tests/support/lightjob.py: no TensorFlow import

The same job both ways: the bundled trainer (examples/train.py, style flags: ps:0 and worker:0
on h1, worker:1 on h2) on the lab of tests/support/testbed, and as one Slurm job on a real Slurm
over the same hosts (tests/support/testbed/slurm.py: slurmctld here, a slurmd in each host's
namespace). Per repetition, interleaved (order alternating), each after one unmeasured warm-up of
each (so the code is synced and every sync is a no-change one): the start of `up` until

- `up` returns (lab: every task verified listening; Slurm: the job submitted and read once),
- Slurm only: the job's first step started (the batch script's `started` line),
- the first training step (the first `step N` line in any worker's log),

each followed by `tfctl down`. With `--light` the job is tests/support/lightjob.py (a step every
0.2 s, no TensorFlow): what tfctl and Slurm add, without the seconds of importing TensorFlow that
dominate (and, on this shared 2-core machine, blur) the real job's figure. The Slurm here is
idle and schedules at once (`sched_interval=1`): a real cluster's queue wait comes on top of
the figure and is not measured.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

import yaml
from _common import LIGHT_JOB, ROOT, machine_line, median, ratio, tfctl_argv, timed

from tests.support.testbed import Testbed
from tests.support.testbed.slurm import SlurmCluster, slurm_missing

EXAMPLES = ROOT / "examples"
STEP = re.compile(r"^step \d+ ", re.M)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--light", action="store_true", help="the light job, not TensorFlow")
    args = parser.parse_args()
    why = slurm_missing()
    if why is not None:
        raise SystemExit(why)
    print(machine_line())
    with tempfile.TemporaryDirectory(prefix="tfctl-bench-") as tmp, Testbed(2) as testbed, \
            SlurmCluster(testbed) as cluster:
        job_dir = Path(tmp) / "job"
        job_dir.mkdir()
        if args.light:
            shutil.copy(LIGHT_JOB, job_dir / "train.py")
        else:
            for name in ("train.py", "evaluate.py", "digits.py"):
                shutil.copy(EXAMPLES / name, job_dir / name)
        job = {"script": "train.py", "style": "flags",
               "args": ["--steps=100000"] + ([] if args.light else ["--log_every=1"])}
        data = testbed.inventory_dict(job, ps={"h1": 1, "h2": 0})
        data["slurm"] = {"host": "local", "workdir": str(Path(tmp) / "shared")}
        inv = job_dir / "cluster.yaml"
        inv.write_text(yaml.safe_dump(data, sort_keys=False))
        env = {**os.environ, "SLURM_CONF": str(cluster.conf)}
        modes = {"lab": [], "slurm": ["--on", "slurm"]}
        ups: dict[str, list[float]] = {m: [] for m in modes}
        steps: dict[str, list[float]] = {m: [] for m in modes}
        job_start: list[float] = []
        shared = Path(tmp) / "shared"
        for rep in range(-1, args.reps):  # rep -1: the warm-up, not counted
            order = list(modes) if rep % 2 == 0 else list(reversed(modes))
            for mode in order:
                watch = FirstLines({
                    "step": ([h.workdir / ".tfctl" / "runs" for h in testbed.hosts]
                             + [shared / ".tfctl" / "slurm"], "*/worker-*.log", STEP),
                    "job": ([shared], "lab-*.out", re.compile(r"^tfctl: started ", re.M))})
                started = time.monotonic()
                up = timed(tfctl_argv(inv, "up", *modes[mode]), env=env).check(f"up ({mode})")
                seen = watch.wait("step", started)
                watch.stop()
                timed(tfctl_argv(inv, "down", "--grace", "1"), env=env).check("down")
                if rep < 0:
                    continue
                ups[mode].append(up.wall_s)
                steps[mode].append(seen["step"])
                if mode == "slurm":
                    job_start.append(seen["job"])
            if rep >= 0:
                print(f"  rep {rep + 1}: " + ", ".join(
                    f"{m}: up {ups[m][-1]:.2f} s, first step {steps[m][-1]:.2f} s"
                    for m in modes) + f" (Slurm job's first step started {job_start[-1]:.2f} s)",
                    flush=True)
        assert cluster.jobs() == []
    lab_up, slurm_up = median(ups["lab"]), median(ups["slurm"])
    lab_step, slurm_step = median(steps["lab"]), median(steps["slurm"])
    what = "the light job (no TensorFlow)" if args.light else "real TensorFlow"
    print(f"{what}, flags, ps:0 + 2 workers on 2 lab hosts, medians of {args.reps}")
    print(f"  up returns:        lab {lab_up:.2f} s, slurm {slurm_up:.2f} s")
    print(f"  Slurm step start:  {median(job_start):.2f} s after `up --on slurm` began")
    print(f"  first train step:  lab {lab_step:.2f} s, slurm {slurm_step:.2f} s, "
          f"slurm - lab {slurm_step - lab_step:+.2f} s, ratio {ratio(slurm_step, lab_step)}")
    return 0


class FirstLines:
    """Watches, from now on, files that did not exist before (`glob` under each folder): the
    first moment (time.monotonic) a line matching each key's pattern shows in one of them."""

    def __init__(self, wanted: dict[str, tuple[list[Path], str, re.Pattern[str]]]):
        self.wanted = wanted
        self.before = {key: set(self._files(key)) for key in wanted}
        self.seen: dict[str, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _files(self, key: str) -> list[Path]:
        folders, glob, _ = self.wanted[key]
        return [f for folder in folders for f in folder.glob(glob)]

    def _run(self) -> None:
        while not self._stop.is_set() and len(self.seen) < len(self.wanted):
            for key, (_, _, pattern) in self.wanted.items():
                if key in self.seen:
                    continue
                for f in set(self._files(key)) - self.before[key]:
                    try:
                        if pattern.search(f.read_text(errors="replace")):
                            self.seen[key] = time.monotonic()
                            break
                    except OSError:
                        continue
            time.sleep(0.02)

    def wait(self, key: str, started: float, timeout_s: float = 300) -> dict[str, float]:
        """Seconds from `started` to each key seen, once `key` was (or after `timeout_s`)."""
        deadline = time.monotonic() + timeout_s
        while key not in self.seen:
            if time.monotonic() > deadline:
                raise AssertionError(f"no {key} line within {timeout_s:g} s")
            time.sleep(0.05)
        return {k: t - started for k, t in self.seen.items()}

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


if __name__ == "__main__":
    sys.exit(main())
