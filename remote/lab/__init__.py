"""The shared lab: who holds or reserves which GPU of every host (claims, `tfctl lab`, `reserve`,
`release`); the records and rows are pure, `ops.py` does the I/O."""
