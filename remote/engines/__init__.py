"""The job for other schedulers: the same plan as a Slurm batch script or a Kubeflow TFJob.

Pure text generation over `inventory.plan.Plan` (no I/O, no SSH): `slurm.py` writes an sbatch
script whose tasks compute their TF_CONFIG (or flags) from the allocation when they start, and
`tfjob.py` writes a `kubeflow.org/v1` TFJob whose pods get theirs from the training operator.
`tfctl export slurm|tfjob` (tui/cli/plan.py) prints them.
"""
