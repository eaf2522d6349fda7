"""The name the other hosts of the lab reach a host by: what the plan's cluster spec says.

An inventory `address` is how this client reaches the host over ssh, and is often an alias of
the user's ~/.ssh/config (`Host labh2` / `HostName 10.231.0.12`) that no host can resolve: a
cluster spec naming `labh2:2222` leaves TensorFlow's tasks unable to find each other. So the
spec names the host by its ssh config's HostName, as OpenSSH resolves it (`ssh -G`, cached by
the config files: openssh.py), which is where the client's ssh itself connects; a jump host
reaches that name from the lab's side too. Where the lab's network differs from the client's
view (a second NIC, a name only the client's DNS knows) the inventory's `cluster_address`
says it, and wins.

Without an `ssh` client (or with `TFCTL_SSH_G=0`) paramiko's parser reads the config, as for
connecting (sshconfig.py); imported only then, so `tfctl plan` stays free of SSH libraries.
A config that cannot be read for the address leaves the address as written: the plan is still
made, and connecting names the config's mistake.
"""

from __future__ import annotations

from tfctl.inventory.model import Host
from tfctl.remote.connect import openssh
from tfctl.remote.errors import RemoteError


def cluster_address(host: Host) -> str:
    """The name the cluster spec gives `host` (make_plan's `reach`)."""
    if host.cluster_address:
        return host.cluster_address
    if host.transport == "local":
        return host.address
    try:
        name = _hostname(host)
    except (RemoteError, ValueError):  # a config ssh cannot read, or an address no argv can
        return host.address           # carry (a NUL byte): connecting says so, `plan` still plans
    # OpenSSH lowercases a name it did not rewrite: keep the address as it was written then.
    return host.address if name.lower() == host.address.lower() else name


def _hostname(host: Host) -> str:
    ssh = openssh.ssh_binary()
    if ssh is None:
        from tfctl.remote.connect.sshconfig import resolve

        return resolve(host.address, host.user, host.port).hostname
    found = openssh.settings(ssh, host.address, host.user, host.port).get("hostname")
    return found[0] if found else host.address
