#!/usr/bin/env python3
"""The host agent's start: a new session answering one request, against `python -S` (its floor).

    python benchmarks/agent_start.py                        # 21 interleaved repetitions
    python benchmarks/agent_start.py --baseline /work/before --reps 31
    python benchmarks/agent_start.py --instructions         # + valgrind's count, load-proof

What a host pays each time a command (or the holder) opens an agent session: the command each
tree's own client runs on a host (`agentclient.agent_command`: a shell that execs the host's
Python with `-S` on the boot program), its stdin as the client sends it (the program's line,
then one request), until the agent answers and sees its input end. The request is `runs` on an
empty workdir: an operation that does almost nothing, so what is timed is the start. The
program is installed and its bytecode cached by an untimed first start, as a host has it after
the first command. The floor is the same shell exec'ing the same Python with `-S -c pass`: what
no agent can start below. Each tree's command and stdin come from that tree's own client (a
subprocess with the tree first on `PYTHONPATH`), so `--baseline` compares the two as shipped.

Wall is the median (and the best) of the repetitions; CPU is user+sys of the process
(RUSAGE_CHILDREN). `--instructions` also counts the instructions of one start under valgrind
(callgrind's `Ir`), which the machine's load does not change.
"""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from _common import BASELINE, PYTHON, Timed, arguments, machine_line, median, ratio, timed

GOAL_MS = 30.0
"""Issue 35's goal for one start answering one request, bytecode cached."""

SHIPPED = r"""
import base64, json, sys
from tfctl.remote.agent.wire import WIRE_VERSION
from tfctl.remote.connect.session import agentclient
python, workdir = sys.argv[1], sys.argv[2]
request = json.dumps({"workdir": workdir, "op": "runs", "v": WIRE_VERSION}).encode() + b"\n"
print(json.dumps({"command": agentclient.agent_command(python, workdir),
                  "stdin": base64.b64encode(agentclient.payload().line + request).decode()}))
"""
"""Run with a tree first on PYTHONPATH: the command that tree's client runs on a host to start
its agent, and the stdin it sends it (the program's line and one `runs` request)."""


class Start:
    """One tree's agent start: its command, its stdin, and the answer it must give."""

    def __init__(self, name: str, tree: str | None, python: str, workdir: Path) -> None:
        env = dict(os.environ)
        if tree is not None:
            env["PYTHONPATH"] = os.pathsep.join([str(Path(tree).resolve()),
                                                 env.get("PYTHONPATH", "")])
        said = subprocess.run([PYTHON, "-c", SHIPPED, python, str(workdir)], env=env,
                              capture_output=True, text=True, check=True).stdout
        shipped = json.loads(said)
        self.name = name
        self.argv = ["sh", "-c", shipped["command"]]
        self.stdin = base64.b64decode(shipped["stdin"]).decode()  # base64 and JSON: ASCII
        self.workdir = workdir

    def run(self) -> Timed:
        started = timed(self.argv, stdin=self.stdin)
        if '"ok": true' not in started.stdout:
            raise SystemExit(f"{self.name}: the agent did not answer:\n{started.stdout[-2000:]}"
                             f"\n{started.stderr[-2000:]}")
        return started


def floor_argv(python: str) -> list[str]:
    return ["sh", "-c", f"exec {python} -S -c pass"]


def instructions(argv: list[str], stdin: str | None) -> float | None:
    """Millions of instructions of one run under callgrind (the exec'd process's), or None
    without valgrind."""
    if shutil.which("valgrind") is None:
        return None
    done = subprocess.run(["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null",
                           "--trace-children=yes", *argv], input=(stdin or "").encode(),
                          capture_output=True, env=dict(os.environ, PYTHONHASHSEED="0"))
    counts = [int(n) for n in re.findall(rb"Collected : (\d+)", done.stderr)]
    return counts[-1] / 1e6 if counts else None


def main() -> int:
    parser = arguments(__doc__, reps=21, baseline=BASELINE)
    parser.add_argument("--python", default=PYTHON, help="the hosts' Python (default: this one)")
    parser.add_argument("--instructions", action="store_true",
                        help="also count one start's instructions under valgrind")
    args = parser.parse_args()
    print(machine_line())
    with tempfile.TemporaryDirectory(prefix="agent-start-") as tmp:
        starts = [Start("this", None, args.python, Path(tmp) / "this")]
        if args.baseline:
            starts.append(Start("before", args.baseline, args.python, Path(tmp) / "before"))
        for start in starts:  # installs the program and caches its bytecode, untimed
            start.workdir.mkdir()
            start.run()
            start.run()
        walls: dict[str, list[float]] = {s.name: [] for s in starts}
        walls["floor"] = []
        cpus: dict[str, list[float]] = {name: [] for name in walls}
        contenders: list[Start | None] = [*starts, None]
        for rep in range(args.reps):
            turn = rep % len(contenders)
            for start in contenders[turn:] + contenders[:turn]:
                t = start.run() if start else timed(floor_argv(args.python)).check("floor")
                name = start.name if start else "floor"
                walls[name].append(t.wall_s)
                cpus[name].append(t.cpu_s)
        print(f"python {args.python}; {args.reps} interleaved repetitions; one `runs` request")
        print(f"{'what':<34}{'wall ms':>9}{'best ms':>9}{'CPU ms':>8}{'÷ floor':>9}")
        floor = median(walls["floor"])
        for name, label in [(s.name, f"agent start ({s.name})") for s in starts] + [
                ("floor", f"floor: {Path(args.python).name} -S -c pass")]:
            wall = median(walls[name])
            print(f"{label:<34}{wall * 1000:>9.1f}{min(walls[name]) * 1000:>9.1f}"
                  f"{median(cpus[name]) * 1000:>8.1f}{ratio(wall, floor):>9}")
        this = median(walls["this"]) * 1000
        print(f"GOAL agent start ≤ {GOAL_MS:g} ms: {this:.1f} ms "
              f"({'met' if this <= GOAL_MS else 'NOT met'}); "
              f"{this - floor * 1000:.1f} ms above the floor")
        if args.baseline:
            print(f"this ÷ before: {ratio(median(walls['this']), median(walls['before']))}")
        if args.instructions:
            counted = {s.name: instructions(s.argv, s.stdin) for s in starts}
            counted["floor"] = instructions(floor_argv(args.python), None)
            if None in counted.values():
                print("valgrind is not installed: no instruction counts")
            else:
                print("instructions (callgrind Ir, millions): " + ", ".join(
                    f"{k} {v:.1f}" for k, v in counted.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
