"""The exporters: the plan as a Slurm batch script (run by bash, with a stand-in srun) and as a
Kubeflow TFJob (checked against the TFJob CRD)."""
