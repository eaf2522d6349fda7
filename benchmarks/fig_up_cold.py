#!/usr/bin/env python3
"""Cold `tfctl --persist 0 up` ÷ `pdsh -f 32` over fresh connections, until every task listens
(goal ≤ 1.0).

    python benchmarks/fig_up_cold.py                        # 16 hosts, 48 light tasks, 3 reps
    python benchmarks/fig_up_cold.py --hosts 4 --reps 1
    python benchmarks/fig_up_cold.py --reps 5 --baseline /tmp/b43

tfctl: `tfctl up` of the light job (3 per host, a no-change sync first unless `--no-sync`) with
nothing kept (`--persist 0`: its own SSH connections, an agent started per host). Its peer:
`pdsh -f 32 -R ssh` with fresh OpenSSH connections (the lab's key, strict host-key checking),
starting per host the same 3 processes detached and waiting in the same remote shell until
each one's port listens, as in fig_up_held.py. More in `_figure.py`.
"""

import sys

from _figure import up_figure

if __name__ == "__main__":
    sys.exit(up_figure(__doc__, held=False))
