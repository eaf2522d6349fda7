"""tfctl tests (a package so helpers import as `tests.<module>`)."""
