"""TEST STAND-INS for Slurm's `scontrol` and `srun`, and for the `python3` a task runs.

For tfctl's tests only (never installed anywhere else); stdlib only. `install_slurm_standins`
writes three tiny shims named `scontrol`, `srun` and `python3` into a test's bin folder, each
running this file with the test's interpreter, so that the sbatch script `tfctl export slurm`
writes runs its real bash on a machine without Slurm:

- `scontrol show hostnames LIST` prints one node per line, expanding `gpu[07-08],cpu1` as
  Slurm does (same rules as TensorFlow's slurm_cluster_resolver.expand_hostlist).
- `srun --overlap --nodes=1 --ntasks=1 --nodelist=NODE --job-name=NAME --output=FILE CMD...`
  runs CMD here as that one-task step: SLURM_STEP_ID (counted), SLURM_PROCID=0, SLURM_NODEID
  (NODE's place in SLURM_JOB_NODELIST), SLURMD_NODENAME=NODE, output to FILE. The step is its
  own process group, and what Slurm does to a step's processes is done to the group: a SIGTERM
  to srun reaches every process of the step (slurmstepd signals all the processes it tracks,
  not only the first), and when CMD ends whatever it left in the step is killed (Slurm ends a
  step's processes with the step). With TFCTL_TEST_STEP_GPUS=4,5 it also sets
  CUDA_VISIBLE_DEVICES=4,5 in the step, like a Slurm that binds GPUs (gres.conf with File=).
- `python3 ARGS...` writes what the task was given (argv, environment, cwd) as JSON into
  $TFCTL_TEST_RECORDS/<task>.json (task from TFCTL_TASK, `:` as `-`) and exits 0 at once; a task
  whose type is listed in TFCTL_TEST_SERVE (`ps,worker`) serves instead: it waits for SIGTERM;
  TFCTL_TEST_EXIT=worker:1=3 makes that task exit 3. Each run adds a `.` to <task>.attempts.
  With TFCTL_TEST_TASKS=N a task that does not serve ends only once N tasks have a record
  (as a chief trains only once its cluster is up).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve()


def install_slurm_standins(bin_dir: Path) -> Path:
    """Write the `scontrol`, `srun` and `python3` shims into `bin_dir`; return it."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    for name in ("scontrol", "srun", "python3"):
        shim = bin_dir / name
        shim.write_text(f"#!/bin/sh\n# TEST STAND-IN for `{name}`: see {HERE}\n"
                        f'exec "{sys.executable}" "{HERE}" {name} "$@"\n')
        shim.chmod(0o755)
    return bin_dir


def expand_hostlist(hostlist: str) -> list[str]:
    """`n[1-2],m5,o[03-04,6]` → n1 n2 m5 o03 o04 o6 (order kept, zero padding kept)."""
    hosts: list[str] = []
    for part in re.findall(r"[^,\[]*(?:\[[^\]]*\])?", hostlist):
        if not part:
            continue
        m = re.fullmatch(r"([^\[]*)(?:\[([^\]]+)\])?", part)
        assert m is not None, part
        prefix, ranges = m.group(1), m.group(2)
        if ranges is None:
            hosts.append(prefix)
            continue
        for item in ranges.split(","):
            lo, _, hi = item.partition("-")
            for i in range(int(lo), int(hi or lo) + 1):
                hosts.append(prefix + str(i).zfill(len(lo)))
    return hosts


def scontrol(args: list[str]) -> int:
    if args[:2] != ["show", "hostnames"] or len(args) != 3:
        print(f"scontrol stand-in: only `show hostnames LIST`, not {args}", file=sys.stderr)
        return 2
    print("\n".join(expand_hostlist(args[2])))
    return 0


def srun(args: list[str]) -> int:
    options: dict[str, str] = {}
    while args and args[0].startswith("--"):
        key, _, value = args.pop(0)[2:].partition("=")
        options[key] = value
    known = {"overlap", "nodes", "ntasks", "nodelist", "job-name", "output"}
    if set(options) - known or options.get("nodes") != "1" or options.get("ntasks") != "1":
        print(f"srun stand-in: unexpected options {options}", file=sys.stderr)
        return 2
    node = options["nodelist"]
    nodes = expand_hostlist(os.environ["SLURM_JOB_NODELIST"])
    counter = Path(os.environ["TFCTL_TEST_RECORDS"]) / ".steps"
    with counter.open("a") as fh:
        fh.write(".")
    env = dict(os.environ, SLURM_STEP_ID=str(counter.stat().st_size - 1), SLURM_PROCID="0",
               SLURM_NODEID=str(nodes.index(node)), SLURMD_NODENAME=node,
               SLURM_STEP_NODELIST=node, SLURM_JOB_NAME=options.get("job-name", ""))
    if os.environ.get("TFCTL_TEST_STEP_GPUS"):
        env["CUDA_VISIBLE_DEVICES"] = os.environ["TFCTL_TEST_STEP_GPUS"]
    step: list[int] = []  # the step's process group, once started
    pending: list[int] = []  # a signal that came before it

    def forward(signum: int, _frame: object) -> None:
        if step:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(step[0], signum)
        else:
            pending.append(signum)

    signal.signal(signal.SIGTERM, forward)  # before the step starts: no SIGTERM is lost
    with open(options["output"], "ab") as out:
        child = subprocess.Popen(args, env=env, stdout=out, stderr=subprocess.STDOUT,
                                 preexec_fn=os.setpgrp)
        step.append(child.pid)
        for signum in pending:
            forward(signum, None)
        rc = child.wait()
    with contextlib.suppress(ProcessLookupError):
        os.killpg(child.pid, signal.SIGKILL)  # the step has ended: so has all it started
    return 128 - rc if rc < 0 else rc


def python3(args: list[str]) -> int:
    task = os.environ.get("TFCTL_TASK", "unknown")
    record = {"argv": args, "env": dict(os.environ), "cwd": os.getcwd()}
    path = Path(os.environ["TFCTL_TEST_RECORDS"]) / (task.replace(":", "-") + ".json")
    path.write_text(json.dumps(record))
    with path.with_suffix(".attempts").open("a") as fh:
        fh.write(".")
    exits = dict(item.split("=") for item in os.environ.get("TFCTL_TEST_EXIT", "").split(",")
                 if item)
    if task in exits:
        return int(exits[task])
    expected = int(os.environ.get("TFCTL_TEST_TASKS", "0"))
    deadline = time.monotonic() + 30
    while len(list(path.parent.glob("*.json"))) < expected and time.monotonic() < deadline:
        time.sleep(0.05)  # as a chief waits for its cluster: every task has started
    serving = os.environ.get("TFCTL_TEST_SERVE", "").split(",")
    if task.split(":")[0] in serving:
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
        while True:
            time.sleep(0.1)
    return 0


if __name__ == "__main__":
    command = {"scontrol": scontrol, "srun": srun, "python3": python3}[sys.argv[1]]
    sys.exit(command(sys.argv[2:]))
