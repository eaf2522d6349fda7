"""The remote floor: blocking I/O to hosts (SSH or local processes), no UI.

Every host-side operation is one round trip: the stdlib-only `agent` program is sent to the host's
python with its request, and answers with one JSON line. Transports (`ssh.py`, `local.py`) only
move bytes; `fleet.py` runs a step on every host in parallel and collects results per host.
"""
