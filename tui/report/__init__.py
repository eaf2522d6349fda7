"""`tfctl report`: a recorded run drawn as PNG figures and one self-contained HTML page.

matplotlib (Agg, no display) draws; the page embeds every figure as a data: URI and holds no
script, so it opens offline, from a mail attachment, with no server. Only `tfctl report`
imports this package (tests/install/test_layers.py keeps matplotlib out of every other command).
"""
