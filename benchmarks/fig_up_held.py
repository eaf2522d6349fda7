#!/usr/bin/env python3
"""Held `tfctl up` ÷ pdsh over OpenSSH ControlPersist, until every task listens (goal ≤ 0.6).

    python benchmarks/fig_up_held.py                        # 16 hosts, 48 light tasks, 3 reps
    python benchmarks/fig_up_held.py --hosts 4 --reps 1
    python benchmarks/fig_up_held.py --reps 5 --baseline /tmp/b43

tfctl: `tfctl up` of the light job (tests/support/lightjob.py: ps:0 + 2 CPU workers per host, a
no-change sync first unless `--no-sync`) as a user has it by default, its holder
(remote/connect/hold) kept by the previous command lending the agent sessions (the holder's CPU
counted as the command's). Its peer: `pdsh -f 32 -R ssh` over OpenSSH's kept connections
(`-o ControlMaster=auto -o ControlPersist`, warmed first), starting per host the same 3
processes detached (setsid, nohup, a log each) and waiting in the same remote shell until each
one's port listens (`ss -Hltn` every 20 ms), then returning. After each, untimed, `tfctl down`
or a kill of the peer's processes. More in `_figure.py`.
"""

import sys

from _figure import up_figure

if __name__ == "__main__":
    sys.exit(up_figure(__doc__, held=True))
