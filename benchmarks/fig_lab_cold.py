#!/usr/bin/env python3
"""Cold `tfctl --persist 0 lab`, 16 hosts × 4 stand-in GPUs ÷ `pdsh -f 32` over fresh
connections running the same queries (goal ≤ 1.0).

    python benchmarks/fig_lab_cold.py                       # 16 hosts × 4 GPUs, 5 reps
    python benchmarks/fig_lab_cold.py --hosts 4 --reps 1
    python benchmarks/fig_lab_cold.py --reps 5 --baseline /tmp/b43

As fig_lab_held.py, with nothing kept: tfctl's own SSH connections and an agent started per
host (`--persist 0`) against pdsh's fresh OpenSSH connections (the lab's key, strict host-key
checking) running nvidia-smi's two queries side by side and `ps`. More in `_figure.py`.
"""

import sys

from _figure import lab_figure

if __name__ == "__main__":
    sys.exit(lab_figure(__doc__, held=False))
