"""`python -m tfctl.tui` is `tfctl`."""

from tfctl.tui.cli.main import run

run()
