#!/usr/bin/env python3
"""`tfctl lab` on N lab hosts, with and without another user's flood of junk claims on one.

    python benchmarks/claims_flood.py              # 16 hosts, 2 stand-in GPUs each, 7 reps

Each host has stand-in GPUs (tests/support/fakes); our reservation of h1's GPU 0 is a claim in
h1's claims folder (`tfctl reserve`). The flood: 1500 files `nobody.run.junkN.json` (`{}`,
owned by nobody, as another user's would be) moved into that folder, or out again. Per
repetition `lab --json` runs with the flood and without it, in alternating order, over held
connections (`--persist 60`, as a user has it). Every `lab` must show the reservation and at
most one warning line about the flood (docs/claims.md: No user's files hide another's). Prints
the medians and flood − none: the goal is within 2 s. Needs root (network-namespace lab hosts,
tests/support/testbed; chown to nobody).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from _common import (
    Timed,
    arguments,
    light_job_dir,
    machine_line,
    median,
    on_a_testbed,
    stop_holders,
    tfctl_argv,
    timed,
)

NOBODY = 65534
FLOOD = 1500


def lab(inv: Path, env: dict[str, str], host: str) -> Timed:
    """One `tfctl lab --json`, checked: our reservation shows, the flood is one line at most."""
    t = timed(tfctl_argv(inv, "lab", "--json"), env=env).check("lab")
    row = next(r for r in json.loads(t.stdout) if r["host"] == host and r["gpu"] == 0)
    if row["state"] != "reserved":
        raise SystemExit(f"{host}'s GPU 0 is {row['state']}, not reserved:\n{t.stderr[-2000:]}")
    skipped = [line for line in t.stderr.splitlines() if "skipped" in line]
    if len(skipped) > 1:
        raise SystemExit(f"{len(skipped)} warning lines about skipped files:\n{t.stderr[-2000:]}")
    return t


def main() -> int:
    parser = arguments(__doc__, reps=7, hosts=16)
    parser.add_argument("--gpus", type=int, default=2, help="stand-in GPUs per host")
    args = parser.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("needs root: the network-namespace testbed, files owned by nobody")
    print(machine_line())
    with on_a_testbed(args.hosts, "tfctl-flood-") as (tmp, testbed, runtime):
        for name in testbed.names:
            testbed.install_gpus(name, args.gpus)
        spec = {"script": "job.py", "style": "tf_config", "args": ["--forever"]}
        inv = testbed.write_inventory(light_job_dir(tmp) / "cluster.yaml", spec,
                                      gpus={h: [0] for h in testbed.names})
        env = dict(os.environ, TFCTL_PERSIST="60", XDG_RUNTIME_DIR=runtime)
        first = testbed.names[0]
        timed(tfctl_argv(inv, "reserve", f"{first}:0", "--for", "1h"), env=env).check("reserve")
        folder = testbed.claims_dir(first)
        aside = tmp / "flood"
        aside.mkdir()
        names = [f"nobody.run.junk{n}.json" for n in range(FLOOD)]
        for name in names:
            (aside / name).write_text("{}")
            os.chown(aside / name, NOBODY, NOBODY)

        def flood(on: bool) -> None:
            src, dst = (aside, folder) if on else (folder, aside)
            for name in names:
                os.rename(src / name, dst / name)

        print(f"lab: {len(testbed.hosts)} hosts, {args.gpus} GPUs each; the flood: {FLOOD} "
              f"junk files of nobody's in {first}'s claims folder")
        try:
            lab(inv, env, first)  # warm-up, not counted: the holder, the agents
            times: dict[str, list[float]] = {"none": [], "flood": []}
            for rep in range(args.reps):
                for kind in ("none", "flood") if rep % 2 else ("flood", "none"):
                    if kind == "flood":
                        flood(True)
                    times[kind].append(lab(inv, env, first).wall_s)
                    if kind == "flood":
                        flood(False)
                print(f"  rep {rep + 1}: none {times['none'][-1]:.2f} s, flood "
                      f"{times['flood'][-1]:.2f} s", flush=True)
            none, flooded = median(times["none"]), median(times["flood"])
            print(f"lab, wall s (medians of {args.reps}): none {none:.3f}, flood {flooded:.3f};"
                  f" flood − none {flooded - none:+.3f} s (goal ≤ 2 s)")
        finally:
            timed(tfctl_argv(inv, "release", f"{first}:0"), env=env)
            timed(tfctl_argv(inv, "disconnect"), env=env)
            stop_holders(runtime)
    return 0


if __name__ == "__main__":
    sys.exit(main())
