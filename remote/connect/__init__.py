"""Reaching hosts: transports (SSH over paramiko, local processes), host keys, OpenSSH config,
the fleet that runs a step on every host in parallel, the agent session, and the tunnel."""
