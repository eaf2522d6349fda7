"""The tfctl command line run for real on this machine (`transport: local` hosts, no lab)."""
