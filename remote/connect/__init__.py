"""Reaching hosts: transports (SSH over paramiko, local processes), host keys, OpenSSH config,
the fleet that runs a step on every host in parallel, the tunnel, and the shell programs hosts
run; the holder that keeps connections open between commands (`hold/`); the agent session
(`session/`)."""
