"""An interactive session as a run: `tfctl notebook` (Jupyter on N free GPUs) and `tfctl shell`.

Pure. A session is a one-off run (inventory/oneoff.py): one `worker:0` task on one host, on the
GPUs placed for it, claimed while it runs, ended by `tfctl down --run ID` like any run. What
makes it a session is its task and its run record (the manifest's `oneoff`, with `session`
"notebook" or "shell", which `runs`, `status` and `lab` show):

- a notebook's task is the Jupyter server of the host's `python:` (JupyterLab where it is
  installed, else Jupyter Server), bound to the host's 127.0.0.1 on a port chosen free there,
  in the workdir, with the GPU mask in its environment, which every kernel it starts inherits
  (jupyter_server starts a kernel with the server's environment: jupyter/jupyter_client's
  `KernelManager._launch_kernel` copies `os.environ`). Its token is tfctl's, kept on the host in
  a file only its user can read (`.tfctl/sessions/<id>.token` under the workdir, folder 0700)
  and handed to Jupyter as `JUPYTER_TOKEN` by a small `sh` wrapper: never on a command line
  (`/proc/PID/cmdline` is every user's to read) nor in the manifest (the workdir may be).
- a shell's task is a keeper (`sh`): it waits for the interactive shell to say its pid and
  terminal (`.tfctl/runs/<run>/shell.pid`, written by the remote line the client opens with a
  pty), then lives as long as that shell does, so the run, and its claim, end when the shell
  ends, however it ends: an exit, a closed terminal or a lost connection (sshd sends SIGHUP to
  the session's processes). `tfctl down` stops the keeper, which hangs the shell up. While it
  waits it touches the run's `activity` file whenever the shell's terminal was read (a
  keystroke: the tty's atime, which `w` reports as idle time).
"""

from __future__ import annotations

import dataclasses
import json
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tfctl.inventory.model import Inventory
from tfctl.inventory.oneoff import Point, oneoff_plan
from tfctl.inventory.tasks import Plan

NOTEBOOK, SHELL = "notebook", "shell"
KINDS = (NOTEBOOK, SHELL)
TASK = "worker:0"
"""A session's one task (a one-off run's)."""
JUPYTER_MODULES = ("jupyterlab", "jupyter_server")
"""The Jupyter servers a notebook may start, in order of preference, by module (`python -m`)."""
JUPYTER_PORT = 8888
"""The port a notebook's server takes on its host where that is free (else a free one near)."""
JUPYTER_PORTS = (8888, 8988)
SESSIONS_DIR = ".tfctl/sessions"
"""Under the workdir: each notebook's token file, in a folder only its user may read."""
ACTIVITY = "activity"
"""In the run directory: touched whenever the session's user is active (a kernel executing, a
keystroke), its mtime what the lab's idle policy reads."""
SHELL_PID = "shell.pid"
"""In the run directory: `PID TTY` of a shell session's interactive shell."""
SHELL_JOIN_S = 60
"""How long a shell's keeper waits for its shell to start before the session ends unused."""

_KEEPER = r"""
dir=.tfctl/runs/$TFCTL_RUN_ID
waited=0
while [ ! -s "$dir/shell.pid" ]; do
  if [ "$waited" -ge $((2 * JOIN_S)) ]; then
    echo "tfctl: no shell joined this session within JOIN_S s: it ends"; exit 1
  fi
  sleep 0.5; waited=$((waited + 1))
done
read -r pid tty < "$dir/shell.pid"
hangup() { kill -HUP -"$pid" 2>/dev/null || kill -HUP "$pid" 2>/dev/null; exit 0; }
trap hangup TERM INT HUP
echo "tfctl: shell $pid on $tty joined"
touch "$dir/activity"
seen=
while kill -0 "$pid" 2>/dev/null; do
  read_at=$(stat -c %X "$tty" 2>/dev/null)
  if [ -n "$read_at" ] && [ "$read_at" != "$seen" ]; then
    [ -n "$seen" ] && touch "$dir/activity"
    seen=$read_at
  fi
  sleep 1 & wait $!
done
echo "tfctl: the shell ended"
""".replace("JOIN_S", str(SHELL_JOIN_S))
"""A shell session's task (see the module's docstring); `sleep & wait`, so that a TERM is
acted on at once (sh runs a trap only between commands)."""

_TOKEN_WRAPPER = ('JUPYTER_TOKEN=$(cat "$1") || exit 1; export JUPYTER_TOKEN; shift; '
                  'exec "$@"')


class SessionError(ValueError):
    """A session that cannot start as asked: its sentence says why and what to do."""


@dataclass(frozen=True)
class JupyterFound:
    """What the host's `python:` has of Jupyter (`check` says it, `notebook` starts it)."""

    module: str | None
    """The server `notebook` starts (`python -m MODULE`), None where there is none to start."""
    versions: Mapping[str, str]
    """Distribution → version, of jupyterlab, jupyter_server, notebook and ipykernel."""

    @property
    def usable(self) -> bool:
        return self.module is not None and "ipykernel" in self.versions

    def words(self) -> str:
        """`JupyterLab 4.6.0 (ipykernel 7.4.0)`, or what is missing."""
        kernel = self.versions.get("ipykernel")
        if self.module is None:
            return "no Jupyter server"
        name = "JupyterLab" if self.module == "jupyterlab" else "Jupyter Server"
        dist = "jupyterlab" if self.module == "jupyterlab" else "jupyter_server"
        said = f"{name} {self.versions.get(dist, '?')}"
        return f"{said} (ipykernel {kernel})" if kernel else f"{said}, but no ipykernel"


def install_command(python: str) -> str:
    """What installs Jupyter for the host's `python:`."""
    return f"{shlex.quote(python)} -m pip install jupyterlab ipykernel"


def missing_jupyter(host: str, python: str, found: JupyterFound) -> str:
    """The sentence for a host whose `python:` cannot run a notebook."""
    what = "has no Jupyter" if found.module is None else "has Jupyter but no ipykernel"
    return (f"{host}'s python ({python}) {what}, so no notebook can start there: install it "
            f"with `{install_command(python)}` on {host} (or in `job.setup`)")


JUPYTER_PROBE = (
    "import json, importlib.util as u\n"
    "from importlib import metadata\n"
    "found = {}\n"
    "for d in ('jupyterlab', 'jupyter_server', 'notebook', 'ipykernel'):\n"
    "    try:\n"
    "        found[d] = metadata.version(d)\n"
    "    except Exception:\n"
    "        pass\n"
    f"mods = [m for m in {JUPYTER_MODULES!r} if u.find_spec(m) is not None]\n"
    "print('JUPYTER ' + json.dumps({'versions': found, 'modules': mods}))\n")
"""Asked of the host's `python:` (metadata only, nothing imported): its Jupyter."""


def read_jupyter(output: str) -> JupyterFound | None:
    """The probe's answer; None where it printed none (no such python)."""
    for line in output.splitlines():
        if line.startswith("JUPYTER "):
            data = json.loads(line[len("JUPYTER "):])
            modules = [m for m in JUPYTER_MODULES if m in (data.get("modules") or [])]
            return JupyterFound(modules[0] if modules else None,
                                dict(data.get("versions") or {}))
    return None


def token_path(session_id: str) -> str:
    """The notebook's token file, relative to the workdir."""
    return f"{SESSIONS_DIR}/{session_id}.token"


def notebook_argv(python: str, module: str, port: int, token_file: str) -> tuple[str, ...]:
    """Jupyter's server on the host's 127.0.0.1:`port`, in the workdir, its token read from
    `token_file` (relative to the workdir) by a `sh` wrapper; no browser there. A login as
    root is let through (`allow_root`, which only lifts Jupyter's refusal to start as root):
    the session runs as whoever the inventory logs in as, as every task does."""
    return ("sh", "-c", _TOKEN_WRAPPER, "tfctl-notebook", token_file, python, "-m", module,
            "--no-browser", "--ServerApp.ip=127.0.0.1", f"--ServerApp.port={port}",
            "--ServerApp.port_retries=0", "--ServerApp.root_dir=.",
            "--ServerApp.allow_root=True")


def keeper_argv() -> tuple[str, ...]:
    """A shell session's task: the keeper (the module's docstring)."""
    return ("sh", "-c", _KEEPER, "tfctl-shell")


def session_record(kind: str, command: Sequence[str], name: str | None = None,
                   **more: Any) -> dict[str, Any]:
    """What the session's run records of itself (the manifest's `oneoff`): a one-off's record
    (its command as `tfctl runs` shows it) with `session` and, for a notebook, `port` and
    `token_file`."""
    if kind not in KINDS:
        raise SessionError(f"no session kind {kind!r}: {', '.join(KINDS)}")
    return {"command": shlex.join(command) if command else kind, "name": name, "sweep": None,
            "point": {}, "index": 0, "points": 1, "session": kind, **more}


def session_plan(inv: Inventory, host: str, gpus: Sequence[int], argv: Sequence[str],
                 record: Mapping[str, Any], port: int | None = None) -> Plan:
    """The session's plan: a one-off's (the host's workdir, env and mask) with `argv` as its
    task, and `port`, where it serves one (a notebook: `up` waits for it to listen)."""
    plan = oneoff_plan(inv, host, gpus, Point(tuple(argv)), record)
    task = dataclasses.replace(plan.tasks[0], argv=tuple(argv), port=port)
    place = dataclasses.replace(plan.places[0], port=port)
    return dataclasses.replace(plan, tasks=(task,), places=(place,))


def session_of(oneoff: Mapping[str, Any] | None) -> str:
    """A run's session kind from its record ("" for a run that is no session)."""
    kind = (oneoff or {}).get("session")
    return str(kind) if kind in KINDS else ""
