#!/usr/bin/env python3
"""`tfctl sync` of a 5,000-file tree vs bare `rsync -a` over the same ssh (P2).

    python benchmarks/sync_vs_rsync.py                 # 1 lab host, 5 repetitions
    python benchmarks/sync_vs_rsync.py --files 5000 --reps 7 --hosts 4

The source holds `--files` small files in 50 folders. Both contenders sync it to a lab host
(tests/lab: a real sshd) with the same key and strict host-key checking, into two different
folders, each synced once before timing. Per repetition, interleaved (order alternating):
  no change   `tfctl sync` (a fresh process, as a user runs it) and `rsync -a -e 'ssh ...'`, and
              tfctl's sync step inside `up` (`sync_all` on a fresh connection, no CLI start-up);
  1 MB change one 1 MB file rewritten with new random bytes (and a newer mtime) before each
              contender's run.
With --hosts N, both sync to N hosts (tfctl in parallel, rsync in a serial loop, as a script
would). Ratios are of medians taken in this one run.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
import tempfile
import time
from pathlib import Path

from _common import (
    machine_line,
    median,
    ratio,
    ssh_options,
    tfctl_argv,
    timed,
)

from tests.lab import Lab
from tfctl.inventory.load import load_inventory
from tfctl.remote.fleet import Fleet
from tfctl.remote.sync import sync_all

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


def rsync_argv(lab: Lab, source: Path, host: str, dest: str) -> list[str]:
    ssh = ["ssh", *ssh_options(lab.key, lab.known_hosts, lab.user)]
    return ["rsync", "-a", "-e", shlex.join(ssh), f"{source}/",
            f"{lab.host(host).address}:{dest}/"]


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
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=5000)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--hosts", type=int, default=1)
    args = parser.parse_args()
    print(machine_line())
    with tempfile.TemporaryDirectory(prefix="tfctl-bench-") as tmp, Lab(args.hosts) as lab:
        source = Path(tmp) / "src"
        make_tree(source, args.files)
        inv = lab.write_inventory(Path(tmp) / "cluster.yaml",
                                  {"script": "pkg00/mod00000.py", "sync": {"source": "src"}})
        bare = {h: str(lab.host(h).workdir.parent / "bare") for h in lab.names}

        def rsync_all() -> float:
            started = time.monotonic()
            for h in lab.names:
                timed(rsync_argv(lab, source, h, bare[h])).check("rsync")
            return time.monotonic() - started

        def tfctl_sync() -> float:
            return timed(tfctl_argv(inv, "sync")).check("tfctl sync").wall_s

        tfctl_sync()
        rsync_all()
        print(f"tree: {args.files} files + one 1 MB file; {args.hosts} lab host(s) "
              f"({'netns' if lab.isolated else 'loopback'}); {args.reps} repetitions")
        same: dict[str, list[float]] = {"tfctl sync": [], "rsync -a": [], "sync step": []}
        changed: dict[str, list[float]] = {"tfctl sync": [], "rsync -a": []}
        for rep in range(args.reps):
            order = ["tfctl sync", "rsync -a", "sync step"]
            for name in order if rep % 2 == 0 else order[::-1]:
                same[name].append({"tfctl sync": tfctl_sync, "rsync -a": rsync_all,
                                   "sync step": lambda: in_process_sync(inv)}[name]())
            for name in ["tfctl sync", "rsync -a"][::1 if rep % 2 == 0 else -1]:
                change_big_file(source / BIG)
                changed[name].append(tfctl_sync() if name == "tfctl sync" else rsync_all())
        report(same, changed)
    return 0


def report(same: dict[str, list[float]], changed: dict[str, list[float]]) -> None:
    m = {k: median(v) for k, v in same.items()}
    c = {k: median(v) for k, v in changed.items()}
    print(f"{'medians, wall s':<28}{'no change':>11}{'1 MB changed':>14}")
    print(f"{'tfctl sync (CLI)':<28}{m['tfctl sync']:>11.3f}{c['tfctl sync']:>14.3f}")
    print(f"{'rsync -a over ssh':<28}{m['rsync -a']:>11.3f}{c['rsync -a']:>14.3f}")
    print(f"{'sync step of up (no CLI)':<28}{m['sync step']:>11.3f}{'':>14}")
    print(f"P2 no change: tfctl sync ÷ rsync -a = {ratio(m['tfctl sync'], m['rsync -a'])} "
          f"(goal ≤ 1.2); sync step ÷ rsync -a = {ratio(m['sync step'], m['rsync -a'])}")
    print(f"P2 1 MB changed: tfctl sync ÷ rsync -a = {ratio(c['tfctl sync'], c['rsync -a'])}")


if __name__ == "__main__":
    sys.exit(main())
