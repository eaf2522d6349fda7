"""The engines a run starts on, and their one interface.

engine.py: the `Engine` Protocol (start, status, host status, logs, wait, down, restart,
rollback), `UpOptions`, and the records the engines answer with; hosts.py: `HostsEngine`, the
user's hosts through their agents; slurm.py: `SlurmEngine`, one Slurm job (slurm_read.py reads
its state); choice.py: which engine a new run starts on (`up --on`) and which the current run
is on. The engines use remote/runs/ (the up sequence, status, logs, stop) and
remote/exporters/ (the sbatch script); neither imports this package. `RunController`
(remote/controller.py) sits above both.
"""
