#!/usr/bin/env python3
"""How long a real TensorFlow job takes to start: `up --ps-first` vs all at once (the default).

    python benchmarks/tf_start.py                 # 1 lab host: 1 ps + 1 worker, 3 repetitions
    python benchmarks/tf_start.py --hosts 3 --reps 3
    python benchmarks/tf_start.py --hosts 3 --reps 2 --baseline /tmp/before   # before/after

Two figures per start: until `up` returns (every task verified listening), and until the first
training step (the first `step N` line of any worker's log) — what a user waits for.

The bundled trainer (examples/train.py, style flags) on lab hosts (tests/support/testbed, real
sshd), synced once before the runs. Per repetition, interleaved (order alternating): `tfctl up
--no-sync` with `--ps-first` (parameter servers first and until they listen, then the workers until
they listen) and without (every task in one launch, then each verified listening), each followed by
`tfctl down`. With `--baseline DIR` (another version's `tfctl/` tree, as in lab_scale.py) a full
`tfctl up` (no-change sync, all checks, all at once) of this version and of that one are the
contenders instead (this one as a user has it: `--persist 60`, each command borrowing the previous
one's connection holder; that one keeping nothing). Importing TensorFlow takes a task seconds of one
core, so with ps first a job starts in two imports one after the other; all at once, in one, where
the cores are free: every lab host shares this machine's cores, so with more tasks than cores the
imports queue for CPU either way (1 host = 2 tasks on this 2-core machine).
"""

from __future__ import annotations

import os
import re
import shutil
import sys
import time
from pathlib import Path

from _common import (
    ROOT,
    arguments,
    machine_line,
    median,
    on_a_testbed,
    ratio,
    stop_holders,
    tfctl_argv,
    timed,
)

from tests.support.testbed import Testbed

EXAMPLES = ROOT / "examples"


def main() -> int:
    parser = arguments(__doc__, reps=3, hosts=1, baseline="another version's tfctl/ tree: "
                       "full `up` of it (before) against this one's (after)")
    args = parser.parse_args()
    print(machine_line())
    with on_a_testbed(args.hosts, "tfctl-bench-") as (tmp, testbed, runtime):
        job_dir = tmp / "job"
        job_dir.mkdir()
        for name in ("train.py", "evaluate.py", "digits.py"):
            shutil.copy(EXAMPLES / name, job_dir / name)
        job = {"script": "train.py", "style": "flags", "args": ["--steps=100000", "--log_every=1"]}
        inv = testbed.write_inventory(job_dir / "cluster.yaml", job)
        timed(tfctl_argv(inv, "sync"), env=dict(os.environ, TFCTL_PERSIST="0")).check("sync")
        modes = {"ps first": ["--no-sync", "--ps-first"], "all at once": ["--no-sync"]}
        envs: dict[str, dict[str, str] | None] = {m: None for m in modes}
        if args.baseline:  # after: as a user has it, the previous command's holder lending
            modes = {"before": [], "after": []}
            envs = {"before": dict(os.environ, PYTHONPATH=str(Path(args.baseline).resolve()),
                                   TFCTL_PERSIST="0"),
                    "after": dict(os.environ, TFCTL_PERSIST="60", XDG_RUNTIME_DIR=runtime)}
        walls: dict[str, list[float]] = {m: [] for m in modes}
        steps: dict[str, list[float]] = {m: [] for m in modes}
        floor = timed([sys.executable, "-c", "import tensorflow"]).check("import").wall_s
        for rep in range(args.reps):
            order = list(modes) if rep % 2 == 0 else list(reversed(modes))
            for mode in order:
                started = time.monotonic()
                up = timed(tfctl_argv(inv, "up", *modes[mode]), env=envs[mode]
                           ).check(f"up ({mode})")
                walls[mode].append(up.wall_s)
                run_id = re.search(r"run (\S+) is up", up.stdout)
                assert run_id, up.stdout
                steps[mode].append(first_step_s(testbed, run_id.group(1), started))
                timed(tfctl_argv(inv, "down", "--grace", "1"), env=envs[mode]).check("down")
            print(f"  rep {rep + 1}: " + ", ".join(
                f"{m}: up {walls[m][-1]:.2f} s, first step {steps[m][-1]:.2f} s" for m in modes),
                flush=True)
        stop_holders(runtime)
    one, two = modes
    first, together = median(walls[one]), median(walls[two])
    s_first, s_together = median(steps[one]), median(steps[two])
    print(f"real TensorFlow, {args.hosts} host(s) × (1 ps + 1 worker), medians of {args.reps}; "
          f"one `import tensorflow` on the idle machine (the floor): {floor:.2f} s")
    print(f"  up returns:        {one} {first:.2f} s, {two} {together:.2f} s, "
          f"ratio {ratio(together, first)}")
    print(f"  first train step:  {one} {s_first:.2f} s, {two} {s_together:.2f} s, "
          f"ratio {ratio(s_together, s_first)}; ÷ the floor: {ratio(s_first, floor)}, "
          f"{ratio(s_together, floor)}")
    return 0


def first_step_s(testbed: Testbed, run_id: str, started: float, timeout_s: float = 300) -> float:
    """Seconds from `started` until a worker's log on any host shows its first step."""
    logs = [host.workdir / ".tfctl" / "runs" / run_id for host in testbed.hosts]
    while time.monotonic() - started < timeout_s:
        for folder in logs:
            for log in folder.glob("worker-*.log"):
                if re.search(r"^step \d+ ", log.read_text(errors="replace"), re.M):
                    return time.monotonic() - started
        time.sleep(0.05)
    raise AssertionError(f"no training step within {timeout_s:g} s")


if __name__ == "__main__":
    sys.exit(main())
