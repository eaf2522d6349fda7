"""The remote floor: blocking I/O to hosts (SSH or local processes), no UI.

`connect/` reaches a host: transports that only move bytes (SSH, local processes), the fleet
that runs a step on every host in parallel and collects results per host, the holder that keeps
connections between commands, and the agent session. `agent/` is the stdlib-only program that
session runs on each host's own Python: one JSON request per line in, one answer per line out,
for as long as the command runs. Above them: `runs/` (a run's life; `up/` starts one),
`engines/` (what a run starts on, the user's hosts or Slurm, behind one interface) with
`controller.py` (the one API the CLI and the dashboard call), `exporters/` (the job written for
other schedulers), `sync/` (the job's source copied), `gpus/` (the GPUs read and judged), `lab/`
(the shared lab) and `history/` (a run after the fact). Every failure is a class of the tree at
the top of `errors.py`.
"""
