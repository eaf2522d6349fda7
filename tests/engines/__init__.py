"""The engines a run starts on beside the user's hosts: reading a Slurm job's answers, and which
engine a run uses."""
