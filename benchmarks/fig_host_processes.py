#!/usr/bin/env python3
"""A run's processes on a host besides its tasks, after `tfctl up` of the light job (goal 1).

    python benchmarks/fig_host_processes.py                 # 16 hosts × 3 light tasks
    python benchmarks/fig_host_processes.py --hosts 4 --baseline /tmp/b43

After each `tfctl up` (held, as a user has it; `--reps` times, each followed by `down`), counts
in each host's network namespace the processes named `tfctl-*` (/proc/<pid>/comm:
`tfctl-supervise`, `tfctl-watch`, `tfctl-keeper`, ...; the lab view's idle sampler
`tfctl-lab-idle` is no run's and is left out) and prints the counts per host and per name, and
the most on any host. More in `_figure.py`.
"""

import sys

from _figure import host_processes_figure

if __name__ == "__main__":
    sys.exit(host_processes_figure(__doc__))
