"""A run after the fact: the runs the hosts remember (`listing`), bringing a run's folders home
(`collect`), reading what the run recorded about itself (`records`, pure) and what it shows
(`findings`, pure) — what `tfctl runs`, `collect` and `report` are built on."""
