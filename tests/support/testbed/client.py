"""The tfctl command line run by another Unix user of this machine, as that user would run it.

A lab's users run tfctl on their own accounts: their uid, their home (its `~/.ssh` key, its
`~/.local/state`), an inventory they may only read. `tfctl_as` runs the real command line so:
setpriv gives the process the user's uid, gid and groups, HOME is a home of theirs, and no
XDG_* variable of the suite's is passed on.

The suite's interpreter may live under /root (pyenv), which no other user may enter (mode 700).
The command then runs in a mount namespace of its own (`unshare --mount`, root only) where /root
is an empty tmpfs holding only a bind mount of that interpreter's folder: the user reaches the
interpreter and nothing else of root's home; nothing outside the namespace changes.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

from tests.support.testbed.users import LabUser

KEPT = ("PATH", "PYTHONPATH", "LANG", "LC_ALL", "TZ", "TFCTL_PERSIST", "COLUMNS")
"""The suite's variables the user's command keeps: the tfctl it runs is the suite's
(PYTHONPATH), and the session's marker is kept too, so that a process it leaves is still the
suite's (tests/support/leftovers.py)."""


def user_home(folder: Path, user: LabUser, key: Path) -> Path:
    """`folder` made the user's home (mode 700): `~/.ssh/id_ed25519` a copy of `key`."""
    ssh = folder / ".ssh"
    ssh.mkdir(parents=True, exist_ok=True)
    (ssh / "id_ed25519").write_bytes(key.read_bytes())
    (ssh / "id_ed25519").chmod(0o600)
    for path in (folder, ssh, ssh / "id_ed25519"):
        os.chown(path, user.uid, user.gid)
    folder.chmod(0o700)
    return folder


def tfctl_as(user: LabUser, home: Path, inventory: Path, *args: str, timeout: float = 240
             ) -> subprocess.CompletedProcess[str]:
    """`tfctl -i inventory ARGS` run by `user` with HOME=home, in the inventory's folder."""
    from tests.support.leftovers import SESSION_VAR

    env = {k: os.environ[k] for k in (*KEPT, SESSION_VAR) if k in os.environ}
    env.update(HOME=str(home), USER=user.name, LOGNAME=user.name)
    command = ["setpriv", f"--reuid={user.uid}", f"--regid={user.gid}", "--init-groups",
               "env", "-i", *(f"{k}={v}" for k, v in env.items()),
               sys.executable, "-m", "tfctl.tui", "-i", str(inventory), *args]
    hidden = _hidden_interpreter()
    if hidden is not None:
        mounts = (f"mount -t tmpfs tmpfs /mnt && mkdir /mnt/keep && mount --bind {hidden} "
                  f"/mnt/keep && mount -t tmpfs -o mode=755 tmpfs /root && mkdir -p {hidden} "
                  f"&& mount --move /mnt/keep {hidden} && cd {shlex.quote(str(inventory.parent))}"
                  f" && exec {shlex.join(command)}")
        command = ["unshare", "--mount", "--propagation", "private", "sh", "-c", mounts]
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout,
                          cwd=inventory.parent)


def _hidden_interpreter() -> str | None:
    """The folder under /root that holds the interpreter (e.g. /root/.pyenv), or None when
    the interpreter is not under /root."""
    real = Path(os.path.realpath(sys.executable))
    if real.parts[:2] != ("/", "root") or len(real.parts) < 4:
        return None
    return str(Path(*real.parts[:3]))
