#!/usr/bin/env python3
"""Start-up of the commands that contact no host: `tfctl --help` and `tfctl plan` (P5), and
what a command that contacts hosts pays to import its SSH stack (Fabric, paramiko, invoke).

    python benchmarks/cli_startup.py              # 15 interleaved repetitions
    python benchmarks/cli_startup.py --reps 30
    python benchmarks/cli_startup.py --baseline /tmp/before   # another tree, interleaved
    python benchmarks/cli_startup.py --lab 3 --baseline /tmp/before   # + status/exec on a lab

Each repetition runs, in rotating order, a bare `python -c pass` (the interpreter's own floor),
`tfctl --help` and `tfctl -i <16-host inventory> plan`, each as a fresh process as a user runs
them; `plan` twice: with the inventory already validated once (inventory/cache.py: what every
command after the first on an unchanged file gets) and with that cache off
(`TFCTL_INVENTORY_CACHE=0`: YAML and pydantic every time). Also lists which heavy packages
each command imported (none of textual, tensorflow, fabric, paramiko may be), read from the
command's own `sys.modules` at exit. The row `ssh stack import` is a fresh process importing
`tfctl.remote.connect.ssh`, which a command that contacts hosts (`status`, `up`, ...) imports
on its first connection: with `--baseline`, its difference is what Fabric costs such a command.
It also times resolving 3 ssh-config aliases through OpenSSH (`ssh -G`, remote/connect/openssh.py)
in a fresh process, with its answers cached on disk and with that cache off.
`--lab N` also times `tfctl status` and `tfctl exec -- true` on a lab of N real sshd hosts
(tests/support/testbed), which connect to every host (`exec` through Fabric's `Connection.run`).
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import tempfile
from pathlib import Path

from _common import PYTHON, arguments, machine_line, median, ratio, timed

FORBIDDEN = ("textual", "tensorflow", "fabric", "paramiko", "invoke")  # --help never loads them
NOTED = ("pydantic", "yaml", "rich", "click")  # what such a start does import, for the record
PROBE = ("import atexit, json, runpy, sys\n"
         "atexit.register(lambda: print('MODULES ' + json.dumps(sorted({m.split('.')[0] for m in "
         "sys.modules})), file=sys.stderr))\n"
         "sys.argv = ['tfctl'] + sys.argv[1:]\n"
         "runpy.run_module('tfctl.tui', run_name='__main__')\n")


def inventory(folder: Path, hosts: int) -> Path:
    lines = ["name: bench", "defaults: {user: alice, python: python3}", "hosts:"]
    lines += [f"  - {{name: h{i}, address: 10.0.0.{i}, gpus: 2}}" for i in range(1, hosts + 1)]
    lines += ["job: {script: train.py, style: tf_config}"]
    path = folder / "cluster.yaml"
    path.write_text("\n".join(lines) + "\n")
    return path


def heavy_imports(argv: list[str], env: dict[str, str] | None = None) -> list[str]:
    done = timed([PYTHON, "-c", PROBE, *argv], env=env).check(" ".join(argv))
    line = next(x for x in done.stderr.splitlines() if x.startswith("MODULES "))
    return [m for m in json.loads(line[len("MODULES "):]) if m in FORBIDDEN + NOTED]


RESOLVE = ("import time\nfrom tfctl.remote.connect.sshconfig import resolve\n"
           "t = time.perf_counter()\nfor a in ('box1', 'box2', 'box3'):\n    resolve(a)\n"
           "print((time.perf_counter() - t) * 1000)\n")


def resolve_ms(home: Path, reps: int) -> dict[str, float]:
    """Median ms to resolve 3 aliases of `home`'s ~/.ssh/config, ssh -G cache on and off."""
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "config").write_text(
        "".join(f"Host box{i}\n  HostName 10.0.0.{i}\n  User u\n" for i in range(1, 4)))
    found: dict[str, list[float]] = {"cached": [], "cache off": []}
    for _ in range(reps):
        for name, flag in (("cached", "1"), ("cache off", "0")):
            env = dict(os.environ, HOME=str(home), XDG_CACHE_HOME=str(home / "cache"),
                       TFCTL_SSH_G_CACHE=flag)
            found[name].append(float(timed([PYTHON, "-c", RESOLVE], env=env)
                                     .check("resolve").stdout))
    return {k: median(v) for k, v in found.items()}


def main() -> int:
    parser = arguments(__doc__, reps=15, baseline="also run the `tfctl/` tree under DIR (put "
                       "first on PYTHONPATH), interleaved, as `before:` rows")
    parser.add_argument("--lab", type=int, default=0, metavar="N",
                        help="also time status and exec on a lab of N sshd hosts")
    args = parser.parse_args()
    print(machine_line())
    with tempfile.TemporaryDirectory(prefix="tfctl-bench-") as tmp, \
            contextlib.ExitStack() as stack:
        inv = inventory(Path(tmp), 16)
        plan = [PYTHON, "-m", "tfctl.tui", "-i", str(inv), "plan"]
        ssh_stack = [PYTHON, "-c", "import tfctl.remote.connect.ssh"]
        cold = dict(os.environ, TFCTL_INVENTORY_CACHE="0")
        commands: dict[str, tuple[list[str], dict[str, str] | None]] = {
            "python -c pass": ([PYTHON, "-c", "pass"], None),
            "tfctl --help": ([PYTHON, "-m", "tfctl.tui", "--help"], None),
            "tfctl plan (16 hosts)": (plan, None),
            "tfctl plan, cache off": (plan, cold),
            "ssh stack import": (ssh_stack, None)}
        if args.baseline:
            before = dict(os.environ, PYTHONPATH=args.baseline)
            commands |= {"before: tfctl --help": (commands["tfctl --help"][0], before),
                         "before: tfctl plan": (plan, before),
                         "before: plan, cache off": (plan, dict(cold, PYTHONPATH=args.baseline)),
                         "before: ssh stack import": (ssh_stack, before)}
            timed(plan, env=before).check("plan")
        if args.lab:
            from tests.support.testbed.testbed import Testbed

            testbed = stack.enter_context(Testbed(args.lab))
            (Path(tmp) / "lab").mkdir()
            lab_inv = testbed.write_inventory(Path(tmp) / "lab" / "cluster.yaml",
                                          {"script": "job.py", "style": "flags"})
            for name, extra in (("status", ["status"]), ("exec -- true", ["exec", "--", "true"])):
                argv = [PYTHON, "-m", "tfctl.tui", "-i", str(lab_inv), *extra]
                commands[f"lab: {name}"] = (argv, None)
                if args.baseline:
                    commands[f"before: lab: {name}"] = (argv, dict(os.environ,
                                                                   PYTHONPATH=args.baseline))
        timed(plan).check("plan")  # validated once, as by the user's previous command
        walls: dict[str, list[float]] = {k: [] for k in commands}
        names = list(commands)
        for rep in range(args.reps):
            for name in names[rep % len(names):] + names[:rep % len(names)]:
                argv, env = commands[name]
                walls[name].append(timed(argv, env=env).check(name).wall_s)
        imported = {name: heavy_imports(argv[3:], env)
                    for name, (argv, env) in commands.items()
                    if name != "python -c pass" and "ssh stack" not in name
                    and "lab: " not in name}
        resolved = resolve_ms(Path(tmp) / "home", args.reps)
    m = {k: median(v) for k, v in walls.items()}
    floor = m["python -c pass"]
    print(f"medians of {args.reps} interleaved runs, wall s (a fresh process each):")
    for name, wall in m.items():
        if name.startswith("before: ") or "ssh stack" in name or "lab: " in name:
            print(f"  {name:<24}{wall:>7.3f}   {ratio(wall, floor)}× bare python")
            continue
        bad = [x for x in imported.get(name, []) if x in FORBIDDEN]
        extra = "" if name == "python -c pass" else (
            f"   {ratio(wall, floor)}× bare python; forbidden imports: {', '.join(bad) or 'none'}"
            f" (imports {', '.join(x for x in imported[name] if x in NOTED) or 'none of note'})")
        print(f"  {name:<24}{wall:>7.3f}{extra}")
    print(f"ssh -G, 3 aliases resolved in process: {resolved['cached']:.1f} ms cached, "
          f"{resolved['cache off']:.1f} ms with the cache off")
    worst = max(m["tfctl --help"], m["tfctl plan (16 hosts)"])
    print(f"P5 --help and plan: worst median {worst:.3f} s (goal ≤ 0.3 s: "
          f"{'met' if worst <= 0.3 else 'NOT met'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
