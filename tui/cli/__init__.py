"""The `tfctl` command line (click): each command parses its options, makes one call into
`tfctl.remote` and prints through `output.py`. The group and the exit codes are in `main.py`."""
