"""`tfctl notebook` and `tfctl shell`: interactive work on N free GPUs of the lab, as a run.

Each is a session (inventory/session.py): its GPUs placed as `tfctl run` places them (tickets,
one look, first come first served: remote/oneoff.py), claimed while it lives, and a run like
any other for `status`, `logs`, `down --run ID`, `runs`, `report`, `lab` and the dashboard.

The notebook's Jupyter server runs detached on its host, so it lives on when this command ends;
the tunnel to it is this command's: `tfctl notebook` stays in the foreground holding it (healing
it when the SSH connection drops, remote/connect/tunnel.py) until Ctrl-C, as `tfctl tensorboard`
does, and running it again reconnects to the live session (a new tunnel, the same server). The
background holder (remote/connect/hold/) keeps agent sessions between commands, not listening
ports, so a tunnel that outlived the command would need a process of its own, which nobody
could see or stop.

The shell is this command's pty on the host, under the run's keeper there, which ends the run
when the shell ends, however it ends.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import socket
import sys
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, NoReturn

import click

from tfctl.tui.cli.context import EXIT_FAILED, EXIT_USAGE, complete_hosts, obj
from tfctl.tui.cli.output import say, say_event, secho, warn

if TYPE_CHECKING:
    from tfctl.inventory.model import Inventory
    from tfctl.remote.connect.fleet import Fleet

NOTEBOOK_LOCAL_PORT = 8888


def _fail(text: str, code: int = EXIT_USAGE) -> NoReturn:
    secho(f"error: {text}", err=True, fg="red")
    sys.exit(code)


def _check_host(ctx: click.Context, inv: Inventory, host: str | None) -> None:
    if host is not None and host not in {h.name for h in inv.hosts}:
        raise click.BadParameter(f"{host!r} is not a host of {inv.path}; its hosts are "
                                 f"{', '.join(h.name for h in inv.hosts)}", ctx=ctx,
                                 param_hint="'--host'")


_GPUS = click.option("--gpus", "gpus", type=click.IntRange(min=0), default=1, show_default=True,
                     help="GPUs the session gets, all on one host (0: CPU only).")
_HOST = click.option("--host", metavar="HOST", shell_complete=complete_hosts,
                     help="On this host only (default: wherever GPUs are free).")
_WHEN_FREE = click.option("--when-free", is_flag=True, help="Wait here, in the lab's queue, "
                          "for free GPUs instead of refusing when there are none now.")
_NO_SYNC = click.option("--no-sync", is_flag=True, help="Do not sync the code first.")


@click.command()
@_GPUS
@_HOST
@_WHEN_FREE
@click.option("--port", "local_port", type=click.IntRange(1, 65535), default=None,
              help=f"Local port of the tunnel (127.0.0.1 only; default {NOTEBOOK_LOCAL_PORT}, "
                   "or the next free one).")
@click.option("--no-browser", is_flag=True, help="Print the address only; do not open it in "
              "a browser.")
@_NO_SYNC
@click.pass_context
def notebook(ctx: click.Context, gpus: int, host: str | None, when_free: bool,
             local_port: int | None, no_browser: bool, no_sync: bool) -> None:
    """Jupyter on N free GPUs of the lab, tunnelled here; stays up until Ctrl-C.

    The GPUs are placed and claimed as `tfctl run` places them. JupyterLab (or Jupyter Server)
    of the host's `python:` starts detached in the workdir, on the host's 127.0.0.1 with a
    token of tfctl's making and CUDA_VISIBLE_DEVICES set for every kernel; a local port is
    forwarded to it over SSH (healing when the connection drops) and the address, with its
    token, printed and opened in a browser. Ctrl-C closes the tunnel only: the session lives
    on (rerun `tfctl notebook` to reconnect) until `tfctl down --run ID`. `tfctl check` says
    which Jupyter each host has.

    \b
    Example:
      tfctl notebook
      tfctl notebook --gpus 2 --host titan --port 9999 --no-browser
      tfctl notebook --when-free
    """
    from tfctl.inventory.oneoff import too_many_gpus
    from tfctl.remote.connect.fleet import Fleet
    from tfctl.remote.session import live_sessions

    c = obj(ctx)
    inv = c.load()
    _check_host(ctx, inv, host)
    if local_port is not None:
        _port_free_here(local_port)
    hosts = [host] if host else [h.name for h in inv.hosts]
    with Fleet(inv, c.ssh_options()) as fleet:
        live, _failed = live_sessions(fleet, inv, hosts, "notebook")
        if live:
            session = live[0]
            say(f"notebook {session.run_id} is live on {session.host}: reconnecting to it "
                f"(`tfctl down --run {session.run_id}` ends it)")
            _serve_notebook(fleet, inv, session.host, session.run_id, dict(session.record),
                            local_port, no_browser)
            return
    too_many = too_many_gpus(inv, gpus, host=host)
    if too_many:
        _fail(too_many)
    started = _start_notebook(ctx, inv, gpus, host, when_free, not no_sync)
    with Fleet(inv, c.ssh_options()) as fleet:
        _serve_notebook(fleet, inv, *started, local_port, no_browser)


def _port_free_here(port: int) -> None:
    """Refuse a local `--port` that is taken, before anything starts."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the tunnel binds
        try:
            probe.bind(("127.0.0.1", port))
        except OSError as exc:
            _fail(f"local port {port} is taken on this machine ({exc.strerror or exc}): give "
                  "another with --port, or leave --port out for a free one")


def _start_notebook(ctx: click.Context, inv: Inventory, gpus: int, host: str | None,
                    when_free: bool, sync: bool) -> tuple[str, str, dict[str, Any]]:
    """Place, claim and start a notebook session; (host, run id, its run record)."""
    from tfctl.inventory.session import (
        missing_jupyter,
        notebook_argv,
        session_plan,
        session_record,
        token_path,
    )
    from tfctl.remote.connect.fleet import Fleet
    from tfctl.remote.oneoff import candidate_hosts
    from tfctl.remote.queue.ids import new_session_key
    from tfctl.remote.session import (
        forget_ended_tokens,
        forget_token,
        free_port,
        jupyter_on,
        keep_token,
        live_sessions,
        new_token,
    )

    c = obj(ctx)
    hosts = candidate_hosts(inv, gpus, host)
    with Fleet(inv, c.ssh_options()) as fleet:
        found = fleet.map(lambda t: jupyter_on(t, inv.host(t.host.name).python), hosts)
    usable = [h for h in hosts if (j := found.succeeded.get(h)) is not None and j.usable]
    if not usable:
        first = hosts[0]
        j = found.succeeded.get(first)
        if j is None and first in found.failed:
            _fail(f"cannot ask {first} about Jupyter: {found.failed[first]}", EXIT_FAILED)
        from tfctl.inventory.session import JupyterFound

        _fail(missing_jupyter(first, inv.host(first).python, j or JupyterFound(None, {})),
              EXIT_FAILED)
    for h in hosts:
        if h not in usable:
            say(f"{h}: no notebook there ({_jupyter_words(found, h)})")
    session_id = new_session_key()
    token_file = token_path(session_id)
    token = new_token()

    def start(fleet: Fleet, chosen: str, gpu_ids: tuple[int, ...]) -> str:
        t = fleet.transport(chosen)
        jupyter = found.succeeded[chosen]
        module = jupyter.module if jupyter is not None else None
        assert module is not None
        h = inv.host(chosen)
        port = free_port(t)
        live, _ = live_sessions(fleet, inv, [chosen], "notebook")
        forget_ended_tokens(t, h.workdir, [str(x.record.get("token_file")) for x in live])
        keep_token(t, h.workdir, token_file, token)
        record = session_record("notebook", ("jupyter", "lab" if module == "jupyterlab"
                                             else "server"), port=port, token_file=token_file)
        argv = notebook_argv(h.python, module, port, token_file)
        plan = session_plan(inv, chosen, gpu_ids, argv, record, port=port)
        try:
            return _start_plan(plan, c.ssh_options())
        except BaseException:
            forget_token(t, h.workdir, token_file)
            raise

    chosen, run_id = _place_and_start(ctx, inv, gpus, usable, when_free, sync, "notebook",
                                      start)
    return chosen, run_id, {"port": None, "token_file": token_file, "token": token}


def _jupyter_words(found: Any, host: str) -> str:
    j = found.succeeded.get(host)
    return str(found.failed.get(host)) if j is None else j.words()


def _start_plan(plan: Any, ssh: Any) -> str:
    """Start the session's plan; its run id (a start that fails raises, rolled back)."""
    from tfctl.remote.session import start_session

    run_id, task = start_session(plan, ssh, say_event)
    if task is not None and task.ended:
        from tfctl.tui.cli.failures import task_story

        for line in task_story(task):
            click.echo(line, err=True)
        _fail(f"session {run_id} ended at once: {task.describe()}", EXIT_FAILED)
    return run_id


def _place_and_start(ctx: click.Context, inv: Inventory, gpus: int, hosts: list[str],
                     when_free: bool, sync: bool, kind: str, start: Any) -> tuple[str, str]:
    """The session placed and started by the queue's library (remote/queue/sessionstart.py),
    said; (host, run id)."""
    from tfctl.remote.errors import RemoteError
    from tfctl.remote.oneoff import where
    from tfctl.remote.queue.sessionstart import SessionRefused, place_session
    from tfctl.tui.cli.setup import CliUpHooks

    try:
        with _ends_as_interrupt():
            placed = place_session(inv, obj(ctx).ssh_options(), kind, gpus, hosts, when_free,
                                   sync, start, socket.gethostname(), say_event, say,
                                   hooks=CliUpHooks(False))
    except (SessionRefused, RemoteError) as exc:
        _fail(str(exc), EXIT_FAILED)
    if placed.gpus:
        say(f"{kind} {placed.run_id} started on {where(placed.gpus, placed.host)}")
    return placed.host, placed.run_id


def _serve_notebook(fleet: Fleet, inv: Inventory, host: str, run_id: str,
                    record: dict[str, Any], local_port: int | None, no_browser: bool) -> None:
    """Tunnel a local port to the live notebook `run_id` and hold it until Ctrl-C."""
    from tfctl.remote.connect.tunnel import Tunnel
    from tfctl.remote.errors import RemoteError
    from tfctl.remote.session import live_sessions, read_token

    token = record.get("token")
    if record.get("port") is None or not token:
        live, _ = live_sessions(fleet, inv, [host], "notebook")
        mine = [s for s in live if s.run_id == run_id]
        if not mine:
            _fail(f"notebook {run_id} on {host} is no longer live", EXIT_FAILED)
        record = dict(mine[0].record, token=token)
    workdir = inv.host(host).workdir
    if not token:
        token = read_token(fleet.transport(host), workdir, str(record.get("token_file")))
        if not token:
            _fail(f"notebook {run_id}'s token is gone from {host}: end it with `tfctl down "
                  f"--run {run_id}` and start another", EXIT_FAILED)
    remote_port = int(str(record["port"]))
    tunnel = Tunnel(fleet, host, remote_port, local_port or NOTEBOOK_LOCAL_PORT,
                    say=lambda text: say(text))
    try:
        base = tunnel.open()
    except RemoteError as exc:
        _fail(str(exc), EXIT_FAILED)
    try:
        page = "lab" if record.get("command") == "jupyter lab" else ""
        url = f"{base}{page}?token={token}"
        click.echo(f"notebook {run_id} on {host} (127.0.0.1:{remote_port} there): {url}")
        if tunnel.port_note:
            warn(tunnel.port_note)
        problem = tunnel.probe()
        if problem:
            warn(problem)
        say(f"Ctrl-C closes the tunnel; the notebook lives on (`tfctl notebook` reconnects, "
            f"`tfctl down --run {run_id}` ends it)")
        if not no_browser and _has_display():
            import webbrowser

            webbrowser.open(url)
        _hold()
    finally:
        tunnel.close()


def _has_display() -> bool:
    """Whether a browser can open here: a display, or a system that opens one without."""
    return sys.platform in ("darwin", "win32") or bool(os.environ.get("DISPLAY")
                                                       or os.environ.get("WAYLAND_DISPLAY"))


def _hold() -> None:
    """Sleep until Ctrl-C (or SIGTERM, or SIGHUP: a closed terminal)."""
    try:
        with _ends_as_interrupt():
            while True:
                time.sleep(1.0)
    except KeyboardInterrupt:
        say("tunnel closed; the notebook lives on")


@contextlib.contextmanager
def _ends_as_interrupt() -> Iterator[None]:
    """SIGTERM and SIGHUP (a closed terminal) end what runs inside as Ctrl-C does, with
    KeyboardInterrupt, so that its `finally`s run: a session waiting for GPUs takes its ticket
    back from the hosts, where Python's default for either signal would leave it there."""
    import signal

    def interrupt(signum: int, _frame: object) -> None:
        if signum == signal.SIGHUP:
            from tfctl.tui.cli.interrupts import silence_terminal

            silence_terminal()
        raise KeyboardInterrupt

    previous = {s: signal.signal(s, interrupt) for s in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


@click.command(context_settings={"allow_interspersed_args": False})
@_GPUS
@_HOST
@_WHEN_FREE
@_NO_SYNC
@click.argument("command", nargs=-1, type=click.UNPROCESSED, metavar="[-- CMD [ARGS]...]")
@click.pass_context
def shell(ctx: click.Context, gpus: int, host: str | None, when_free: bool, no_sync: bool,
          command: tuple[str, ...]) -> None:
    """An interactive shell (or CMD) on N free GPUs of the lab, in the workdir.

    The GPUs are placed and claimed as `tfctl run` places them, for as long as the shell is
    open: they are released when it ends, however it ends (exit, a closed terminal, a lost
    connection). The shell has the host's login environment, the inventory's env and
    CUDA_VISIBLE_DEVICES; it is a run (`tfctl status`, `lab`, `runs` show it; `tfctl down
    --run ID` hangs it up). CMD's exit status is passed through.

    \b
    Example:
      tfctl shell
      tfctl shell --gpus 2 --host titan
      tfctl shell --gpus 1 -- sh -c 'echo $CUDA_VISIBLE_DEVICES; nvidia-smi'
      tfctl shell --when-free -- python train.py --epochs 1
    """
    from tfctl.inventory.oneoff import command_on, too_many_gpus
    from tfctl.inventory.session import keeper_argv, session_plan, session_record
    from tfctl.remote.connect.fleet import Fleet
    from tfctl.remote.connect.interactive import run_session
    from tfctl.remote.errors import RemoteError
    from tfctl.remote.oneoff import candidate_hosts
    from tfctl.remote.session import shell_line

    c = obj(ctx)
    inv = c.load()
    _check_host(ctx, inv, host)
    too_many = too_many_gpus(inv, gpus, host=host)
    if too_many:
        _fail(too_many)
    if command and not command[0].strip():
        _fail("no command after `--`: give one, e.g. `tfctl shell -- nvidia-smi`, or none "
              "for a shell")
    hosts = candidate_hosts(inv, gpus, host)
    plans: dict[str, Any] = {}

    def start(fleet: Fleet, chosen: str, gpu_ids: tuple[int, ...]) -> str:
        argv = command_on(inv.host(chosen), command)
        plan = session_plan(inv, chosen, gpu_ids, keeper_argv(),
                            session_record("shell", argv or ("shell",)))
        plans[chosen] = plan
        return _start_plan(plan, c.ssh_options())

    chosen, run_id = _place_and_start(ctx, inv, gpus, hosts, when_free, not no_sync, "shell",
                                      start)
    task = plans[chosen].tasks[0]
    env = dict(task.env, TFCTL_RUN_ID=run_id, TFCTL_TASK=task.name)
    line = shell_line(task.cwd, env, f".tfctl/runs/{run_id}",
                      command_on(inv.host(chosen), command))
    code = 0
    try:
        with Fleet(inv, dataclasses.replace(c.ssh_options(), persist_s=0.0)) as fleet:
            code = run_session(fleet.transport(chosen), line)
    except RemoteError as exc:
        secho(f"error: {exc}", err=True, fg="red")
        code = EXIT_FAILED
    say(f"shell {run_id} ended (exit {code}): its GPUs are released")
    sys.exit(code)

