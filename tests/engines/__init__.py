"""The engines and exports beside the lab's hosts: Slurm, TFJob, which engine a run uses."""
