"""`python -m tfctl.tui` is `tfctl`."""

from tfctl.tui.cli import run

run()
