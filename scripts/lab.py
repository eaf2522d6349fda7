#!/usr/bin/env python3
"""Start the test lab by hand: real SSH hosts to point tfctl at, torn down on Ctrl-C.

    python scripts/lab.py up --hosts 3 --dir /tmp/mylab     # prints the inventory path, waits
    tfctl -i /tmp/mylab/cluster.yaml check                  # in another terminal
    python scripts/lab.py down --dir /tmp/mylab             # ends a lab (also one left by a crash)

As root the hosts are network namespaces on a private bridge; otherwise sshd on loopback ports.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from pathlib import Path
from types import FrameType

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.support.testbed import Testbed, destroy_lab_dir
from tests.support.testbed.layout import STATE_FILE, running_owner


def _gpus(text: str) -> dict[str, int]:
    """`h1=2,h2=1` -> {"h1": 2, "h2": 1}."""
    pairs = [item.split("=", 1) for item in text.split(",") if item]
    return {name: int(count) for name, count in pairs}


def up(args: argparse.Namespace) -> int:
    stop = False

    def on_signal(signum: int, frame: FrameType | None) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    with Testbed(args.hosts, lab_dir=args.dir, isolated=True if args.isolated else None) as testbed:
        job = {"script": args.script}
        inventory = testbed.write_inventory(
            testbed.dir / "cluster.yaml", job, gpus=_gpus(args.gpus)
        )
        mode = "network namespaces" if testbed.isolated else "loopback ports (no cut/heal)"
        print(f"lab up: {len(testbed.hosts)} hosts on {mode}")
        for host in testbed.hosts:
            print(f"  {host.name}  {host.address}:{host.port}  workdir {host.workdir}")
        print(f"try: {' '.join(testbed.ssh_argv(testbed.hosts[0].name, 'hostname'))}")
        print(inventory, flush=True)
        while not stop:
            time.sleep(0.2)
        print("tearing down", file=sys.stderr)
    return 0


def down(args: argparse.Namespace) -> int:
    lab_dir = Path(args.dir).absolute()
    if not (lab_dir / STATE_FILE).exists():
        print(f"no lab in {lab_dir}", file=sys.stderr)
        return 1
    owner = running_owner(lab_dir)
    if owner is not None:  # ask the `up` process to close its own lab
        os.kill(owner, signal.SIGTERM)
        deadline = time.monotonic() + 30
        while lab_dir.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
    if lab_dir.exists():
        destroy_lab_dir(lab_dir)
    print(f"lab in {lab_dir} is down")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    start = sub.add_parser("up", help="start a lab and wait for Ctrl-C")
    start.add_argument("--hosts", type=int, default=3)
    start.add_argument("--dir", help="lab dir (default: a new temp dir)")
    start.add_argument("--script", default="train.py", help="job.script in the inventory")
    start.add_argument("--gpus", default="", help="GPUs per host in the inventory: h1=2,h2=1")
    start.add_argument("--isolated", action="store_true", help="fail unless namespaces work")
    end = sub.add_parser("down", help="tear down the lab in --dir")
    end.add_argument("--dir", required=True)
    args = parser.parse_args(argv)
    return up(args) if args.command == "up" else down(args)


if __name__ == "__main__":
    sys.exit(main())
