"""A run's life: starting it (`up/`), its setup, status, logs, stop and restart, the current run,
preflight checks, firewall rules, the engines a run goes through, and `RunController`, the one
API the CLI and the dashboard both call."""
