"""A run's life: setup, launch, status, logs, stop, the current run, preflight checks, firewall
rules, and `RunController`, the one API the CLI and the dashboard both call."""
