"""`tfctl up` (and the dashboard's `u`): starting a run, one sequence of phases for every host.

sequence.py: `up`, the phases in order; check.py: the check each host answers and its
judgments; work.py: the sync and the setup the checks found; ports.py: the ports the tasks take
where the inventory writes none; start.py: the tasks started, host by host, phase by phase;
manifest.py: what the run directory records; rollback.py: what a failed or interrupted `up`
stops. `tfctl setup` shares the setup's steps (runs/setup.py, runs/steps.py).
"""
