"""`python -m tfctl.tui` is `tfctl`."""

from tfctl.tui.cli import main

main(prog_name="tfctl")
