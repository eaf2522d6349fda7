"""Code that runs ON the hosts, and nothing else.

The modules here are joined into one program (`connect/session/program.py`) and sent over SSH to
the host's own Python, which runs it with the standard library only: nothing of tfctl is
installed on a host. The shell programs hosts run (`*.sh`) live here too. An import contract
(`scripts/lint`) keeps this package free of tfctl's other modules and of third-party packages.
"""
