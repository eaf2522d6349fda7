"""`tfctl disconnect`: the connections a command keeps for the next one, closed on demand.

Commands keep their hosts' SSH connections and an idle agent session on each in a background
holder of the user's (remote/connect/hold/) for `--persist` seconds after the last use, as
OpenSSH's ControlPersist does; `disconnect` is its `ssh -O exit`.
"""

from __future__ import annotations

import click


@click.command("disconnect")
def disconnect() -> None:
    """Close the connections kept for the next command now (as `ssh -O exit`).

    Commands keep their hosts' connections and an agent session on each for `--persist`
    seconds (default 60) after the last one, in a background holder of yours; this ends it at
    once: its agent sessions on the hosts end and the next command connects afresh. Nothing
    of a run is touched.

    \b
    Example:
      tfctl disconnect
      tfctl --persist 0 status     # one command that keeps nothing
    """
    from tfctl.remote.connect.hold.borrow import stop_holder

    held = stop_holder()
    if held is None:
        click.echo("no connections kept: nothing to close")
        return
    click.echo(f"closed {held.get('links', 0)} kept connection(s) and "
               f"{held.get('sessions', 0)} idle agent session(s) (holder pid {held.get('pid')})")
