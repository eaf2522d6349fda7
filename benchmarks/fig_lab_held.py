#!/usr/bin/env python3
"""Held `tfctl lab`, 16 hosts × 4 stand-in GPUs ÷ pdsh over ControlPersist running the same
queries (goal ≤ 0.4).

    python benchmarks/fig_lab_held.py                       # 16 hosts × 4 GPUs, 5 reps
    python benchmarks/fig_lab_held.py --hosts 4 --reps 1
    python benchmarks/fig_lab_held.py --reps 5 --baseline /tmp/b43

Each host has stand-in GPUs (tests/support/fakes/nvidia_smi_standin.py) and holds a run of the
light job on GPUs 0 and 1. tfctl: `tfctl lab` as a user has it by default, the previous
command's holder lending its agent sessions (the holder's CPU counted as the command's); it
must list every GPU. Its peer: `pdsh -f 32 -R ssh` over OpenSSH's kept connections (warmed
first) running per host what the agent runs: nvidia-smi's two selective queries side by side
(the fields of remote/agent/lab.py) and `ps`; it must bring every GPU's row. More in
`_figure.py`.
"""

import sys

from _figure import lab_figure

if __name__ == "__main__":
    sys.exit(lab_figure(__doc__, held=True))
