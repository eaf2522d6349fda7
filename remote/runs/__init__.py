"""A run's life: starting it (`up/`), its setup, status, logs, stop and restart, the current run,
preflight checks and firewall rules. The engines (remote/engines/) start and act on a run
through these modules, and `RunController` (remote/controller.py), the one API the CLI and the
dashboard both call, sits above both; nothing here imports either."""
