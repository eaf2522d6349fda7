#!/usr/bin/env python3
"""Cost per host of GPU telemetry: one `nvidia-smi -lms` stream vs one `nvidia-smi` call per tick.

    python benchmarks/telemetry_stream.py                 # over SSH to a 1-host lab (root + sshd)
    python benchmarks/telemetry_stream.py --local         # `transport: local`, no SSH
    python benchmarks/telemetry_stream.py --ticks 30 --interval-ms 500

Both methods read the same GPUs for the same number of ticks through tfctl's own transports
(`Transport.stream` / `Transport.run`), on a host whose `nvidia-smi` is the test stand-in (a Python
program). Measured per method:
  host CPU    CPU time of the nvidia-smi processes (from /proc on the host: the stream's own
              utime+stime; per call, the calling shell's reaped-children time) plus, over SSH, the
              growth of the host's sshd session process;
  client CPU  this process's CPU time (paramiko's threads or subprocess handling included);
  round trips commands started on the host (SSH exec requests, or local processes).
The stand-in's start-up cost is a Python start (~tens of ms); a real nvidia-smi's is NVML
initialisation (tens to hundreds of ms), so on real GPU hosts the ratio differs in size,
not in direction. One run, no repetition: printed with the machine and the date.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shlex
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from _common import proc_cpu_s  # noqa: E402

from tests.support.fakes import NVIDIA_SMI_STANDIN, install_nvidia_smi_standin  # noqa: E402
from tfctl.inventory.model import Host, Inventory, Job  # noqa: E402
from tfctl.remote.connect.fleet import Fleet  # noqa: E402
from tfctl.remote.connect.transport import Transport  # noqa: E402
from tfctl.remote.gpus.nvsmi import WANTED_GPU_FIELDS, GpuSample, LoopParser  # noqa: E402
from tfctl.remote.gpus.telemetry import BlockAssembler  # noqa: E402

FIELDS = tuple(names[0] for names in WANTED_GPU_FIELDS)
GPUS = 4


@dataclass(frozen=True)
class Cost:
    method: str
    ticks: int
    host_cpu_s: float  # nvidia-smi (and its shell) plus sshd
    sshd_cpu_s: float  # the sshd part of host_cpu_s (0 without SSH)
    client_cpu_s: float
    round_trips: int
    wall_s: float


def read_stat(transport: Transport, pid: int) -> str:
    return transport.run(f"cat /proc/{pid}/stat").stdout.strip()


def session_pid(transport: Transport, over_ssh: bool) -> int | None:
    """The sshd process serving this connection (the parent of our commands' shell)."""
    if not over_ssh:
        return None
    return int(transport.run("echo $PPID").stdout.strip())


def measure_stream(transport: Transport, ticks: int, interval_ms: int, over_ssh: bool) -> Cost:
    sshd = session_pid(transport, over_ssh)
    sshd_before = proc_cpu_s(read_stat(transport, sshd)) if sshd else 0.0
    argv = ["nvidia-smi", "--query-gpu=" + ",".join(FIELDS), "--format=csv,noheader,nounits",
            "-lms", str(interval_ms)]
    client0, wall0 = time.process_time(), time.monotonic()
    stream = transport.stream("echo \"@@pid $$\"; exec " + shlex.join(argv))
    parser, blocks = LoopParser(FIELDS), BlockAssembler()
    lines = stream.lines()
    pid = int(next(lines).split()[1])
    seen = 0
    for line in lines:
        item = parser.feed(line)
        if isinstance(item, GpuSample):
            seen += len(blocks.add(item))
            if seen >= ticks:
                break
    client1, wall1 = time.process_time(), time.monotonic()
    host = proc_cpu_s(read_stat(transport, pid))
    stream.close()
    sshd_cpu = proc_cpu_s(read_stat(transport, sshd)) - sshd_before if sshd else 0.0
    return Cost("stream (-lms)", seen, host + sshd_cpu, sshd_cpu, client1 - client0, 1,
                wall1 - wall0)


def measure_calls(transport: Transport, ticks: int, interval_ms: int, over_ssh: bool) -> Cost:
    sshd = session_pid(transport, over_ssh)
    sshd_before = proc_cpu_s(read_stat(transport, sshd)) if sshd else 0.0
    argv = ["nvidia-smi", "--query-gpu=" + ",".join(FIELDS), "--format=csv,noheader,nounits"]
    command = shlex.join(argv) + "; cat /proc/$$/stat"
    host = client = 0.0
    wall0 = time.monotonic()
    for tick in range(ticks):
        client0 = time.process_time()
        result = transport.run(command)
        client += time.process_time() - client0
        rows = [line for line in result.stdout.splitlines() if line.startswith(("20", "19"))]
        assert len(rows) == GPUS, result.stdout
        host += proc_cpu_s(result.stdout.strip().splitlines()[-1], children=True)
        next_tick = wall0 + (tick + 1) * interval_ms / 1000
        time.sleep(max(0.0, next_tick - time.monotonic()))
    wall = time.monotonic() - wall0
    sshd_cpu = proc_cpu_s(read_stat(transport, sshd)) - sshd_before if sshd else 0.0
    return Cost("call per tick", ticks, host + sshd_cpu, sshd_cpu, client, ticks, wall)


def local_host(work: Path) -> Host:
    return Host(name="bench", address="127.0.0.1", user=None, port=None, identity_file=None,
                known_hosts=str(work / "known_hosts"), jump=None, workdir=str(work),
                python=sys.executable, env={}, gpus=tuple(range(GPUS)), ps=0, transport="local")


def run(fleet: Fleet, ticks: int, interval_ms: int, over_ssh: bool) -> list[Cost]:
    transport = fleet.transport("bench")
    transport.run("true")  # connect first: the SSH handshake is paid once by either method
    return [measure_stream(transport, ticks, interval_ms, over_ssh),
            measure_calls(transport, ticks, interval_ms, over_ssh)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--local", action="store_true", help="local transport instead of SSH")
    parser.add_argument("--ticks", type=int, default=20)
    parser.add_argument("--interval-ms", type=int, default=500)
    args = parser.parse_args()
    config = {"host": "bench", "gpus": [{}] * GPUS}
    with tempfile.TemporaryDirectory(prefix="tfctl-bench-") as tmp:
        work = Path(tmp)
        (work / "gpus.json").write_text(json.dumps(config))
        if args.local:
            install_nvidia_smi_standin(work / "bin")
            os.environ["PATH"] = f"{work / 'bin'}:{os.environ['PATH']}"
            os.environ["TFCTL_TEST_NVSMI_CONFIG"] = str(work / "gpus.json")
            with Fleet(Inventory("bench", (local_host(work),), Job(script="x"))) as fleet:
                costs = run(fleet, args.ticks, args.interval_ms, over_ssh=False)
            where = "local transport (subprocess)"
        else:
            from tests.support.testbed import Testbed
            from tfctl.inventory.load import load_inventory

            with Testbed(["bench"]) as testbed:
                testbed.write_tool("bench", "nvidia-smi",
                               f"#!/bin/sh\nexport TFCTL_TEST_NVSMI_CONFIG={work / 'gpus.json'}\n"
                               f"exec {sys.executable} {NVIDIA_SMI_STANDIN} \"$@\"\n")
                inv = testbed.write_inventory(work / "cluster.yaml", {"script": "x.py"})
                with Fleet(load_inventory(inv)) as fleet:
                    costs = run(fleet, args.ticks, args.interval_ms, over_ssh=True)
                where = "SSH to a lab host (" + ("netns" if testbed.isolated else "loopback") + ")"
    report(costs, where, args)
    return 0


def report(costs: list[Cost], where: str, args: argparse.Namespace) -> None:
    stream, calls = costs
    print(f"tfctl telemetry cost · {datetime.datetime.now().isoformat(timespec='seconds')} · "
          f"{platform.node()} · {platform.processor() or platform.machine()} · "
          f"{os.cpu_count()} cores · {platform.system()} {platform.release()}")
    print(f"{where}; {GPUS} GPUs (nvidia-smi stand-in); {args.ticks} ticks every "
          f"{args.interval_ms} ms")
    print(f"{'method':<16}{'ticks':>6}{'host CPU ms':>13}{'(sshd)':>8}{'client CPU ms':>15}"
          f"{'round trips':>13}{'wall s':>8}")
    for c in costs:
        print(f"{c.method:<16}{c.ticks:>6}{c.host_cpu_s * 1000:>13.0f}"
              f"{c.sshd_cpu_s * 1000:>8.0f}{c.client_cpu_s * 1000:>15.0f}{c.round_trips:>13}"
              f"{c.wall_s:>8.1f}")
    print("per tick, call ÷ stream: "
          f"host CPU {_ratio(calls.host_cpu_s, stream.host_cpu_s)}, "
          f"client CPU {_ratio(calls.client_cpu_s, stream.client_cpu_s)}, "
          f"round trips {calls.round_trips / stream.round_trips:.0f}×")


def _ratio(a: float, b: float) -> str:
    return f"{a / b:.1f}×" if b > 0 else f"{a * 1000:.0f} ms vs <1 clock tick"


if __name__ == "__main__":
    sys.exit(main())
