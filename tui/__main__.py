"""`python -m tfctl.tui` is `tfctl`: the program's first code, tui/entry.py, as the console
script runs it."""

from tfctl.tui.entry import run

run()
