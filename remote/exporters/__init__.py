"""The job for other schedulers, written out: the same plan as a Slurm batch script or a
Kubeflow TFJob.

Pure text generation over `inventory.plan.Plan` (no I/O, no SSH): `slurm.py` (with the bash of
`slurm_sh.py`) writes an sbatch script whose tasks compute their TF_CONFIG (or flags) from the
allocation when they start, and `tfjob.py` writes a `kubeflow.org/v1` TFJob whose pods get
theirs from the training operator. `tfctl export slurm|tfjob` (tui/cli/plan.py) prints them;
the Slurm engine (remote/engines/slurm.py) submits the same script. They sit in remote/, not
inventory/, because the job's end they write is the one the hosts apply
(remote/runs/endrule.py, remote/agent/watch.py's grace).
"""
