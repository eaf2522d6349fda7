"""Connections that outlive a command, as OpenSSH's ControlPersist keeps them.

A CLI command that wants an agent session and finds no holder starts one (a background process
of the same user, `python -m tfctl.remote.connect.hold.holder`) and borrows its sessions from
it at once: the connections and agent sessions that command opens are the holder's, and stay
open for `--persist` seconds (default 60) after the last use. The next command, within that
time, even one typed the moment the first returned, borrows a ready agent session per host
through the holder's Unix socket instead of paying an SSH handshake and an interpreter start
per host.

- `protocol.py`: where the socket is (a 0700 folder of the user's), its name (a digest of this
  tfctl's code, so an upgraded tfctl never talks to an old holder), the frames both sides speak.
- `holder.py`: the holder process: connections by host settings, idle agent sessions by
  command, lent to one command at a time; it exits after `persist_s` without a client.
- `borrow.py`: the command's side: `HeldTransport` (agent sessions from the holder, everything
  else over the command's own connection, opened only when needed) and starting the holder
  (the command binds its socket and hands it over, so it never waits for the holder to listen).

The host-key policy is the command's own: the holder connects with the same code and the same
options (`accept_new_host_keys` is part of what a connection is kept under), and a connection
opened under one policy is never lent to a command asking another.
"""
