"""Copying the job's source to the hosts: rsync, the small-change put through the agent, the SFTP
fallback, and the result type they share (`result.py`)."""
