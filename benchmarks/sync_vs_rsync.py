#!/usr/bin/env python3
"""`tfctl sync` of a 5,000-file tree vs bare `rsync -a` over the same ssh (P2).

    python benchmarks/sync_vs_rsync.py                 # 1 lab host, 5 repetitions
    python benchmarks/sync_vs_rsync.py --files 5000 --reps 7 --hosts 4

The source holds `--files` small files in 50 folders. Both contenders sync it to a lab host
(tests/support/testbed: a real sshd) with the same key and strict host-key checking, into two
different folders, each synced once before timing. Per repetition, interleaved (order alternating):
  no change   `tfctl sync` (a fresh process, as a user runs it) and `rsync -a -e 'ssh ...'`, and
              tfctl's sync step inside `up` (`sync_all` on a fresh connection, no CLI start-up)
              (and with --baseline DIR, another version's `tfctl sync` into its own folders);
  1 MB change one 1 MB file rewritten with new random bytes (and a newer mtime) before each
              contender's run.
With --hosts N, both sync to N hosts (tfctl in parallel, rsync in a serial loop, as a script
would). Ratios are of medians taken in this one run.
"""

from __future__ import annotations

import os
import shlex
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from _common import arguments, machine_line, median, ratio, ssh_options, tfctl_argv, timed

from tests.support.testbed import Testbed
from tfctl.inventory.load import load_inventory
from tfctl.remote.connect.fleet import Fleet
from tfctl.remote.sync.rsync import sync_all

BIG = "data/big.bin"


def make_tree(root: Path, files: int) -> None:
    for i in range(files):
        folder = root / f"pkg{i % 50:02d}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"mod{i:05d}.py").write_text(f"# file {i}\nVALUE = {i}\n" + "x = 1\n" * (i % 40))
    (root / "data").mkdir(exist_ok=True)
    (root / BIG).write_bytes(os.urandom(1 << 20))


def change_big_file(path: Path) -> None:
    """New random content, and a modification time one second past the last: rsync's (and
    tfctl's) quick check compares size and whole-second mtime, so a rewrite within the same
    second at the same size would look unchanged to both."""
    before = path.stat().st_mtime_ns
    path.write_bytes(os.urandom(1 << 20))
    stamp = max(path.stat().st_mtime_ns, before + 1_000_000_000)
    os.utime(path, ns=(stamp, stamp))


def rsync_argv(testbed: Testbed, source: Path, host: str, dest: str) -> list[str]:
    ssh = ["ssh", *ssh_options(testbed.key, testbed.known_hosts, testbed.user)]
    return ["rsync", "-a", "-e", shlex.join(ssh), f"{source}/",
            f"{testbed.host(host).address}:{dest}/"]


def in_process_sync(inventory: Path) -> float:
    """Wall seconds of tfctl's sync step alone: a fresh fleet (connections included), no CLI."""
    inv = load_inventory(inventory)
    started = time.monotonic()
    with Fleet(inv) as fleet:
        result = sync_all(fleet)
    if result.failed:
        raise SystemExit(f"sync failed: {dict(result.failed)}")
    return time.monotonic() - started


def main() -> int:
    parser = arguments(__doc__, reps=5, hosts=1, baseline="a folder holding another version's "
                       "tfctl/ tree: its `tfctl sync` (into its own folders) runs interleaved")
    parser.add_argument("--files", type=int, default=5000)
    args = parser.parse_args()
    print(machine_line())
    with tempfile.TemporaryDirectory(prefix="tfctl-bench-") as tmp, Testbed(args.hosts) as testbed:
        source = Path(tmp) / "src"
        make_tree(source, args.files)
        job = {"script": "pkg00/mod00000.py", "sync": {"source": "src"}}
        inv = testbed.write_inventory(Path(tmp) / "cluster.yaml", job)
        bare = {h: str(testbed.host(h).workdir.parent / "bare") for h in testbed.names}

        def rsync_all() -> float:
            started = time.monotonic()
            for h in testbed.names:
                timed(rsync_argv(testbed, source, h, bare[h])).check("rsync")
            return time.monotonic() - started

        def cli(inventory: Path, env: dict[str, str] | None = None) -> Callable[[], float]:
            return lambda: timed(tfctl_argv(inventory, "sync"), env=env).check("sync").wall_s

        runs: dict[str, Callable[[], float]] = {"tfctl sync": cli(inv), "rsync -a": rsync_all}
        if args.baseline:
            before = testbed.write_inventory(
                Path(tmp) / "before.yaml", job, name="before",
                host_fields={h: {"workdir": str(testbed.host(h).workdir.parent / "before")}
                             for h in testbed.names})
            env = dict(os.environ, PYTHONPATH=str(Path(args.baseline).resolve()))
            runs["tfctl sync (before)"] = cli(before, env)
        for run in runs.values():
            run()  # the first copy, not counted
        print(f"tree: {args.files} files + one 1 MB file; {args.hosts} lab host(s) "
              f"({'netns' if testbed.isolated else 'loopback'}); {args.reps} repetitions")
        same: dict[str, list[float]] = {name: [] for name in [*runs, "sync step"]}
        changed: dict[str, list[float]] = {name: [] for name in runs}
        for rep in range(args.reps):
            order = list(same)
            for name in order[rep % len(order):] + order[:rep % len(order)]:
                same[name].append(runs[name]() if name in runs else in_process_sync(inv))
            order = list(changed)
            for name in order[rep % len(order):] + order[:rep % len(order)]:
                change_big_file(source / BIG)
                changed[name].append(runs[name]())
        report(same, changed)
    return 0


def report(same: dict[str, list[float]], changed: dict[str, list[float]]) -> None:
    m = {k: median(v) for k, v in same.items()}
    c = {k: median(v) for k, v in changed.items()}
    print(f"{'medians, wall s':<28}{'no change':>11}{'1 MB changed':>14}")
    for name in same:
        print(f"{name:<28}{m[name]:>11.3f}" + (f"{c[name]:>14.3f}" if name in c else ""))
    rsync = m["rsync -a"]
    print(f"P2 no change: tfctl sync ÷ rsync -a = {ratio(m['tfctl sync'], rsync)} (goal ≤ 1.2);"
          f" sync step (inside up, no CLI start) ÷ rsync -a = {ratio(m['sync step'], rsync)}")
    print(f"P2 1 MB changed: tfctl sync ÷ rsync -a = {ratio(c['tfctl sync'], c['rsync -a'])}")
    if "tfctl sync (before)" in m:
        print(f"after ÷ before: no change {ratio(m['tfctl sync'], m['tfctl sync (before)'])}, "
              f"1 MB changed {ratio(c['tfctl sync'], c['tfctl sync (before)'])}")


if __name__ == "__main__":
    sys.exit(main())
