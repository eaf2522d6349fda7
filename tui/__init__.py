"""The top floor, what the user works with: the `tfctl` command line (`cli/`), the terminal
dashboard (`app/`), the same dashboard for browsers (`web/`), a run's report (`report/`) and a
long command's progress on the terminal (`progress.py`). It calls `tfctl.remote` and
`tfctl.inventory`; neither imports it."""
