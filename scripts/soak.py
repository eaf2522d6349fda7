#!/usr/bin/env python3
"""Soak: many `tfctl up` / `tfctl down` cycles on a lab of real sshd hosts, then count leftovers.

    sudo python scripts/soak.py                 # 100 cycles on a fresh 3-host lab
    sudo python scripts/soak.py --cycles 20     # a shorter soak

Each cycle is the real command line (a new `tfctl` process each time, as a user would run it):
`up` (sync, start 3 ps + 3 workers of a light job) and `down`. Afterwards it prints
- processes of any of the runs still alive (on any host): must be 0;
- TensorFlow task ports still bound on any host: must be 0;
- runs whose logs were kept on every host (one per task): must be all of them;
and exits 0 only when all three hold and every command succeeded. Needs the network-namespace
lab (root): each host its own ports. Slow by design, so not in the default test suite;
`tests/testbed/test_faults.py::test_soak_up_down_cycles` (marked slow) runs it on the session lab.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.support.testbedtools import job_dir, processes_of_run, run_id_from, tfctl

TASK_PORTS = (2222, 2223)
JOB = {"script": "job.py", "style": "flags", "args": ["--forever"]}


@dataclass
class SoakResult:
    cycles: int
    seconds: float = 0.0
    failures: list[str] = field(default_factory=list)
    run_ids: list[str] = field(default_factory=list)
    leftover_processes: int = 0
    bound_ports: int = 0
    runs_with_logs: int = 0

    @property
    def ok(self) -> bool:
        return not self.failures and self.leftover_processes == 0 and self.bound_ports == 0 \
            and self.runs_with_logs == self.cycles

    def report(self) -> str:
        per = self.seconds / max(1, self.cycles)
        return "\n".join([
            f"soak: {self.cycles} up/down cycles in {self.seconds:.0f} s ({per:.1f} s per "
            f"cycle); {len(self.failures)} failed commands",
            *(f"  ✖ {f}" for f in self.failures[:10]),
            f"processes of any run left: {self.leftover_processes}",
            f"task ports still bound: {self.bound_ports}",
            f"runs with logs kept on every host: {self.runs_with_logs}/{self.cycles}",
        ])


def soak(testbed: Any, cycles: int, say: Callable[[str], None] = print,
         grace_s: float = 2.0) -> SoakResult:
    """Run `cycles` up/down cycles on `lab` (a tests.support.testbed.Lab in namespace mode) and
    count."""
    if not testbed.isolated:
        raise RuntimeError("the soak needs the network-namespace lab (root and `ip netns`)")
    base = Path(tempfile.mkdtemp(prefix="tfctl-soak-"))
    try:
        return _cycles(
            testbed,
            testbed.write_inventory(job_dir(base) / "cluster.yaml", JOB),
            cycles,
            say,
            grace_s,
        )
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _cycles(testbed: Any, inv: Path, cycles: int, say: Callable[[str], None],
            grace_s: float) -> SoakResult:
    result = SoakResult(cycles)
    started = time.monotonic()
    for n in range(1, cycles + 1):
        t0 = time.monotonic()
        up = tfctl(inv, "up", timeout=300)
        t1 = time.monotonic()
        if up.returncode != 0:
            result.failures.append(f"cycle {n}: up exited {up.returncode}: "
                                   f"{up.stderr.strip().splitlines()[-1:]}")
        else:
            result.run_ids.append(run_id_from(up.stdout))
        down = tfctl(inv, "down", "--grace", str(grace_s), timeout=300)
        if down.returncode != 0:
            result.failures.append(f"cycle {n}: down exited {down.returncode}: "
                                   f"{down.stderr.strip().splitlines()[-1:]}")
        if n == 1 or n % 10 == 0 or n == cycles:
            say(f"cycle {n}/{cycles}: up {t1 - t0:.1f} s, down {time.monotonic() - t1:.1f} s")
    result.seconds = time.monotonic() - started
    result.leftover_processes = sum(len(processes_of_run(r)) for r in result.run_ids)
    result.bound_ports = count_bound_ports(testbed)
    result.runs_with_logs = sum(logs_kept(testbed, r) for r in result.run_ids)
    return result


def count_bound_ports(testbed: Any) -> int:
    count = 0
    for host in testbed.names:
        for row in testbed.run(host, "ss -Hltn").stdout.splitlines():
            local = row.split()[3]
            count += int(local.rsplit(":", 1)[1]) in TASK_PORTS
    return count


def logs_kept(testbed: Any, run_id: str) -> bool:
    """Every host kept the run's directory with a non-empty log for each of its tasks."""
    for host in testbed.names:
        run_dir = testbed.host(host).workdir / ".tfctl" / "runs" / run_id
        # the tasks' logs: not the run keeper's own (keeper.log), which came after this check
        logs = [log for log in run_dir.glob("*.log") if log.name != "keeper.log"]
        if len(logs) != 2 or not all(log.stat().st_size for log in logs):  # its ps + worker
            return False
    return True


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cycles", type=int, default=100)
    parser.add_argument("--hosts", type=int, default=3)
    parser.add_argument("--grace", type=float, default=2.0, help="`down --grace` seconds")
    args = parser.parse_args()
    if os.geteuid() != 0:
        print("the soak needs root (the lab's network namespaces)", file=sys.stderr)
        return 2
    from tests.support.testbed import Testbed

    with Testbed(args.hosts, isolated=True) as testbed:
        result = soak(testbed, args.cycles, grace_s=args.grace)
    print(result.report())
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())
