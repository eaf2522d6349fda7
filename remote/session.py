"""A session on the lab (`tfctl notebook`, `tfctl shell`): what the hosts are asked and told.

The session is a run (inventory/session.py says what its task is); this module asks a host's
`python:` about Jupyter, finds the live sessions of the workdirs, keeps a notebook's token on
its host, starts the run through `RunController` (as a one-off's point starts, remote/oneoff.py)
and builds the line a shell session opens with a pty. Placement, tickets and the claim are the
one-off's (remote/oneoff.py, remote/queue/sessionstart.py).
"""

from __future__ import annotations

import secrets
import shlex
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from tfctl.inventory.model import Inventory
from tfctl.inventory.session import (
    JUPYTER_PORT,
    JUPYTER_PORTS,
    SESSIONS_DIR,
    SHELL_PID,
    TASK,
    JupyterFound,
    read_jupyter,
    session_of,
)
from tfctl.inventory.tasks import Plan
from tfctl.remote.connect.fleet import Fleet
from tfctl.remote.connect.session import agentops
from tfctl.remote.connect.transport import SshOptions, Transport, shell_path
from tfctl.remote.errors import RemoteError
from tfctl.remote.runs.status import TaskStatus

Say = Callable[[str], None]


def jupyter_probe_line(python: str) -> str:
    """The remote shell line that asks the host's `python:` about Jupyter (metadata only)."""
    from tfctl.inventory.session import JUPYTER_PROBE

    return f"{shell_path(python)} -c {shlex.quote(JUPYTER_PROBE)}"


def jupyter_on(t: Transport, python: str) -> JupyterFound | None:
    """What the host's `python:` has of Jupyter; None where that python does not run."""
    return read_jupyter(t.run(jupyter_probe_line(python), timeout_s=60).stdout)


@dataclass(frozen=True)
class LiveSession:
    """A session's run that is still live on its host."""

    host: str
    run_id: str
    kind: str
    record: Mapping[str, object]
    """Its run record (the manifest's `oneoff`): for a notebook, `port` and `token_file`."""


def live_sessions(fleet: Fleet, inv: Inventory, hosts: Sequence[str], kind: str
                  ) -> tuple[list[LiveSession], dict[str, str]]:
    """The live sessions of `kind` in the workdirs of `hosts`, newest first, and the hosts that
    could not say (host → why)."""
    found = fleet.map(lambda t: agentops.runs(t, inv.host(t.host.name).workdir), hosts)
    live = []
    for host in hosts:
        for run in found.succeeded.get(host) or []:
            if run.live and session_of(run.oneoff) == kind:
                live.append(LiveSession(host, run.run_id, kind, dict(run.oneoff or {})))
    live.sort(key=lambda s: s.run_id, reverse=True)
    return live, {h: str(e) for h, e in found.failed.items()}


def new_token() -> str:
    """A notebook's token: 32 bytes from the system's CSPRNG, URL-safe."""
    return secrets.token_urlsafe(32)


def keep_token(t: Transport, workdir: str, token_file: str, token: str) -> None:
    """Write the token into `token_file` (relative to `workdir`) on the host, readable by its
    user only; the token travels on stdin, never on a command line."""
    folder = f"{shell_path(workdir)}/{shlex.quote(SESSIONS_DIR)}"
    line = (f"umask 077 && mkdir -p {folder} && chmod 700 {folder} && "
            f"cat > {shell_path(workdir)}/{shlex.quote(token_file)}")
    done = t.run(line, stdin=token, timeout_s=30)
    if not done.ok:
        raise RemoteError(t.host.name, f"cannot keep the notebook's token there: "
                          f"{done.tail(2) or 'exit ' + str(done.exit_code)}")


def read_token(t: Transport, workdir: str, token_file: str) -> str | None:
    """A live notebook's token, read back from its host; None where it is gone."""
    done = t.run(f"cat {shell_path(workdir)}/{shlex.quote(token_file)}", timeout_s=30)
    return done.stdout.strip() or None if done.ok else None


def forget_token(t: Transport, workdir: str, token_file: str) -> None:
    """Remove a notebook's token file (its session did not start, or has ended)."""
    t.run(f"rm -f {shell_path(workdir)}/{shlex.quote(token_file)}", timeout_s=30)


def forget_ended_tokens(t: Transport, workdir: str, keep: Sequence[str]) -> None:
    """Remove the token files of the workdir's notebooks but those of `keep` (the live ones'
    token files, relative to the workdir): an ended session's token opens nothing, but is no
    file to leave behind."""
    folder = f"{shell_path(workdir)}/{shlex.quote(SESSIONS_DIR)}"
    kept = " ".join(shlex.quote(k.rsplit("/", 1)[-1]) for k in keep)
    line = (f"cd {folder} 2>/dev/null || exit 0; for f in *.token; do [ -f \"$f\" ] || continue; "
            f"case \" {kept} \" in *\" $f \"*) ;; *) rm -f \"$f\";; esac; done")
    t.run(line, timeout_s=30)


def free_port(t: Transport) -> int:
    """A port free on the host's loopback for the notebook's server: JUPYTER_PORT, else the
    lowest free one of JUPYTER_PORTS (the agent's choice, as `up` chooses task ports)."""
    low, high = JUPYTER_PORTS
    chosen = agentops.choose_ports(t, {"tasks": [{"task": TASK, "preferred": JUPYTER_PORT}],
                                       "range": [low, high]})
    port = (chosen.get("chosen") or {}).get(TASK)
    if port is None:
        raise RemoteError(t.host.name, f"no free port for the notebook's server between {low} "
                          f"and {high}")
    return int(port)


def start_session(plan: Plan, ssh: SshOptions, say: Say) -> tuple[str, TaskStatus | None]:
    """Start the session's plan as a run (the hosts' engine, as `up`): its run id and its task
    as the start left it. Raises as `up` does; a failed start has stopped what it started."""
    from tfctl.remote.controller import RunController
    from tfctl.remote.engines.engine import UpOptions

    with RunController(plan.inventory, ssh) as controller:
        run_id = controller.start(plan, UpOptions(sync=False), say)
        started = controller.up_status
        return run_id, (started.tasks[0] if started and started.tasks else None)


def shell_line(workdir: str, env: Mapping[str, str], run_dir: str,
               command: Sequence[str]) -> str:
    """The line a shell session opens on its host (with a pty from a terminal): into the
    workdir, the session's env exported (its mask, the inventory's env, its run id and task,
    so that its processes on the GPUs are the run's and `tfctl down` ends them), the shell's
    pid and terminal said to the run's keeper (`run_dir`, relative to the workdir), then
    `command`, or a login shell, in the shell's place (`exec`: the pid said is its pid)."""
    exports = [f"{k}={shlex.quote(str(v))}" for k, v in env.items() if k.isidentifier()]
    pid_file = f"{shell_path(run_dir)}/{SHELL_PID}"
    run = shlex.join(command) if command else '"${SHELL:-/bin/sh}" -l'
    parts = [f"cd {shell_path(workdir)} || exit 1"]
    if exports:
        parts.append("export " + " ".join(exports))
    parts += ['tty=$(tty 2>/dev/null) || tty=-',
              f'echo "$$ $tty" > {pid_file}.tmp && mv -f {pid_file}.tmp {pid_file} || exit 1',
              f"exec {run}"]
    return "; ".join(parts)
