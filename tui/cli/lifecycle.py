"""The core loop's commands: `sync`, `up`, `wait`, `status`, `down`.

Ctrl-C, SIGTERM or SIGHUP during `up`, before it says "is up", stops whatever this run
started, says what it stopped, and exits 130 (`interrupts.rollback_on_interrupt`); once it is up
(`up --wait`) an interrupt leaves the run running.
"""

from __future__ import annotations

import contextlib
import json
import sys
import time
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import click

from tfctl.tui.cli.context import EXIT_FAILED, complete_hosts_list, obj
from tfctl.tui.cli.interrupts import rollback_on_interrupt
from tfctl.tui.cli.output import (
    echo,
    error_line,
    live_steps,
    print_json,
    report_failures,
    say,
    secho,
)
from tfctl.tui.cli.setup import CliUpHooks, step_rows

if TYPE_CHECKING:
    from tfctl.inventory.subset import Selection
    from tfctl.remote.controller import DownSummary, RunController, WaitResult
    from tfctl.remote.errors import GpusBusy
    from tfctl.remote.queue.upstart import UpRequest
    from tfctl.remote.runs.status import RunStatus, TaskStatus

JSON_HELP = "Print one JSON object on stdout (progress stays on stderr); see the README."


def _controller(ctx: click.Context) -> RunController:
    from tfctl.remote.controller import RunController

    c = obj(ctx)
    return RunController(c.load(), c.ssh_options())


def selection(ctx: click.Context, only: tuple[str, ...], exclude: tuple[str, ...]) -> Selection:
    """The inventory less the hosts `up --only/--exclude` leave out (`tfctl.inventory.subset`);
    a usage error (exit 2) naming the inventory's hosts for a name that is none of them, or for
    a selection of no host."""
    from tfctl.inventory.subset import SelectionError, select_hosts, split_names, unknown_hosts

    inv = obj(ctx).load()
    keep, drop = split_names(only), split_names(exclude)
    try:
        return select_hosts(inv, keep, drop)
    except SelectionError as exc:
        hint = "'--only'" if unknown_hosts(inv, keep) else "'--exclude'" \
            if unknown_hosts(inv, drop) or not keep else "'--only' / '--exclude'"
        raise click.BadParameter(str(exc), ctx=ctx, param_hint=hint) from None


@click.command()
@click.option("--delete", is_flag=True, help="Also delete files in the workdir that the source "
              "no longer has (outputs and run dirs are kept).")
@click.option("--json", "as_json", is_flag=True, help=JSON_HELP)
@click.pass_context
def sync(ctx: click.Context, delete: bool, as_json: bool) -> None:
    """Copy the job's source folder to every host's workdir (incremental, parallel).

    \b
    Example:
      tfctl -i cluster.yaml sync
      tfctl sync --json | jq '.hosts | map_values(.files_transferred)'
    """
    from tfctl.tui.cli.setup import sync_json

    with _controller(ctx) as controller, _one_line_errors(as_json):
        if not controller.inventory.job.sync.enabled:
            if as_json:
                print_json(sync_json(None, enabled=False))
                return
            say("sync is off in the inventory (`sync: false`)")
            return
        hosts = [h.name for h in controller.inventory.hosts]
        with live_steps("tfctl sync", hosts, ("sync",), enabled=not as_json) as rows:
            def on_event(text: str) -> None:
                if rows is not None:
                    host, _, what = text.partition(": ")
                    rows.host_event("sync", host, what)
                say(text)

            result = controller.sync_report(delete=delete, on_event=on_event)
    if as_json:
        print_json(sync_json(result))
        for exc in result.failed.values():
            echo(error_line(exc), err=True)
        if result.failed:
            sys.exit(EXIT_FAILED)
        return
    for host, r in result.succeeded.items():
        note = f" ({r.note})" if r.note else ""
        click.echo(f"{host}: {r.method} {r.files_transferred} files, {r.bytes_transferred} bytes"
                   f" → {r.dest}{note}")
    if result.failed:
        report_failures(result.failed.values())
        sys.exit(EXIT_FAILED)


@contextlib.contextmanager
def _one_line_errors(as_json: bool) -> Iterator[None]:
    """Under --json a failure on a host is one line on stderr (`error: h1: what`), exit 1."""
    from tfctl.remote.errors import RemoteError

    try:
        yield
    except RemoteError as exc:
        if not as_json:
            raise
        echo(error_line(exc), err=True)
        sys.exit(EXIT_FAILED)


@click.command()
@click.option("--no-sync", is_flag=True, help="Do not sync the code first.")
@click.option("--wait", "wait_", is_flag=True, help="Block until the job ends; exit with its "
              "status.")
@click.option("--start-timeout", type=float, default=180.0, show_default=True,
              help="Seconds a task may take to start listening on its port.")
@click.option("--setup", "force_setup", is_flag=True, help="Run job.setup on every host even "
              "where its inputs are unchanged.")
@click.option("--force", is_flag=True, help="Launch even onto GPUs other processes use or "
              "other users reserved.")
@click.option("--ps-first", is_flag=True, help="Start the parameter servers first and the "
              "rest only once they listen (the order of the old tutorials); by default every "
              "task starts at once, since TensorFlow's workers and chief wait for their ps.")
@click.option("--all-at-once", is_flag=True, hidden=True,
              help="Every task at once, the default; accepted so that scripts passing it run.")
@click.option("--only", multiple=True, metavar="HOST[,HOST...]", shell_complete=complete_hosts_list,
              help="Run on these hosts of the inventory only (the plan is made over them).")
@click.option("--exclude", multiple=True, metavar="HOST[,HOST...]",
              shell_complete=complete_hosts_list, help="Leave these hosts out of this run.")
@click.option("--on", type=click.Choice(["hosts", "slurm", "lab"]), default="hosts",
              show_default=True, help="The inventory's hosts (`hosts`; `lab` says the same), or "
              "one Slurm job submitted as the inventory's `slurm:` says (README: When you "
              "outgrow the lab).")
@click.option("--when-free", is_flag=True, help="Queue the job instead: it starts by itself "
              "once every GPU its plan needs is free of other holders and reservations, after "
              "the jobs queued before it for them (`tfctl queue`); the wait goes on after this "
              "terminal closes, on this machine (README: A job that waits).")
@click.option("--timeout", "when_free_timeout", metavar="D", default=None,
              help="With --when-free: stop waiting after this long (`12h`, the default; `3d`, "
                   "`90m`).")
@click.option("--json", "as_json", is_flag=True, help=JSON_HELP)
@click.pass_context
def up(ctx: click.Context, no_sync: bool, wait_: bool, start_timeout: float, force_setup: bool,
       force: bool, ps_first: bool, all_at_once: bool, only: tuple[str, ...],
       exclude: tuple[str, ...], on: str, when_free: bool, when_free_timeout: str | None,
       as_json: bool) -> None:
    """Sync, run job.setup (cached), check the GPUs are free, start every task at once.

    On any failure everything started is stopped again. GPUs in use by other processes, or
    that another user reserved (`tfctl reserve`) or their run holds, are refused unless
    --force. With --only/--exclude the run uses part of the lab; `status`, `logs` and `down`
    then act on the hosts it used.

    \b
    Example:
      tfctl -i cluster.yaml up
      tfctl -i cluster.yaml up --wait && echo "job succeeded"
      tfctl up --exclude h3            # h3 is down today
      tfctl up --json | jq -r .run_id
      tfctl up --on slurm --wait       # sbatch it to the cluster `slurm:` names
      tfctl up --when-free --timeout 12h   # start once its GPUs are free; `tfctl queue`
    """
    if when_free or when_free_timeout is not None:
        from tfctl.remote.queue.upstart import UpRequest

        _queue_up(ctx, when_free, when_free_timeout, wait_, force, on, as_json,
                  UpRequest(not no_sync, start_timeout, force_setup, ps_first, only, exclude))
        return
    from tfctl.remote.controller import RunController, UpOptions
    from tfctl.remote.errors import GpusBusy, RemoteError
    options = UpOptions(sync=not no_sync, force_setup=force_setup, force=force,
                        ps_first=ps_first and not all_at_once, start_timeout_s=start_timeout)
    chosen = selection(ctx, only, exclude)
    for note in chosen.notes:
        say(f"warning: {note} (--only/--exclude)")
    hooks = CliUpHooks(as_json)
    controller = RunController(chosen.inventory, obj(ctx).ssh_options(), on=on)
    with controller, rollback_on_interrupt(controller, hooks) as guard, \
            _one_line_errors(as_json):
        try:
            with step_rows(controller, options, hooks, "tfctl up", launch=True) as on_event:
                run_id = controller.up(options, on_event, hooks=hooks)
        except GpusBusy as exc:
            _refuse_busy(exc, as_json)
            say("nothing was started")
            sys.exit(EXIT_FAILED)
        except RemoteError as exc:
            if hooks.run_id is not None or not hooks.reported_failure:
                if as_json:
                    echo(error_line(exc), err=True)
                    sys.exit(EXIT_FAILED)
                raise
            say("nothing was started")  # sync or setup failed, and said how
            sys.exit(EXIT_FAILED)
        assert controller.up_status is not None
        up_line = f"run {run_id} is up · `tfctl logs -f` to follow · `tfctl down` to stop"
        if as_json:
            say(up_line)
        else:
            _print_status(controller.up_status)
            click.echo(up_line)
        guard.is_up = True
        if not as_json:
            if wait_:
                sys.exit(_wait(controller))
            return
        data = _up_json(controller.up_status, chosen)
        data["gpus_taken"] = {h: list(g) for h, g in controller.gpus_taken.items()}
        code = 0
        if wait_:
            code, data["wait"] = _wait_json(controller)
        print_json(data)
        sys.exit(code)


def _queue_up(ctx: click.Context, when_free: bool, timeout: str | None, wait_: bool,
              force: bool, on: str, as_json: bool, request: UpRequest) -> None:
    """`up --when-free`: queue the job (tui/cli/queue.py) rather than start it now."""
    from tfctl.remote.engines.choice import queue_refusal
    from tfctl.remote.lab.targets import parse_duration
    from tfctl.tui.cli.queue import queue_up

    if not when_free:
        raise click.UsageError("--timeout is for --when-free (how long to wait for GPUs)")
    for given, name in ((wait_, "--wait"), (force, "--force")):
        if given:
            raise click.UsageError(f"--when-free waits for free GPUs in the background; "
                                   f"{name} does not go with it")
    refused = queue_refusal(on)
    if refused:
        raise click.UsageError(f"--when-free does not go with --on {on}: {refused}")
    try:
        timeout_s = parse_duration(timeout or "12h")
    except ValueError as exc:
        raise click.BadParameter(str(exc), ctx=ctx, param_hint="'--timeout'") from None
    queue_up(ctx, selection(ctx, request.only, request.exclude), request, timeout_s, as_json)


def _up_json(st: RunStatus, chosen: Selection) -> dict[str, Any]:
    order = [h.name for h in chosen.inventory.hosts]  # a Slurm task's host may be its node
    return {"run_id": st.run_id, "inventory": chosen.inventory.name,
            "hosts": sorted({t.host for t in st.tasks},
                            key=lambda h: order.index(h) if h in order else len(order)),
            "left_out": list(chosen.left_out), "notes": list(chosen.notes),
            "tasks": [_task_json(t) for t in st.tasks]}


def _task_json(t: Any, patterns: Sequence[str] = ()) -> dict[str, Any]:
    """A task as JSON, with the speed its last lines state (`speed_per_s`, `speed_unit`)."""
    from tfctl.remote.agent.wirerecord import fields
    from tfctl.tui.cli.output import task_speed

    data = {f.name: getattr(t, f.name) for f in fields(t)}
    data["last_lines"] = list(t.last_lines)
    speed = task_speed(t, patterns)
    data["speed_per_s"], data["speed_unit"] = speed if speed else (None, None)
    return data


def _refuse_busy(exc: GpusBusy, as_json: bool = False) -> None:
    if as_json:
        echo(error_line(exc), err=True)
        return
    secho("error: GPUs the plan assigns are in use or reserved by others:", err=True, fg="red")
    for line in exc.holders:
        secho(f"  ✖ {line}", err=True, fg="red")
    echo(f"free GPUs instead: {exc.free}", err=True)
    echo("select free GPUs with `gpus: [...]` for those hosts in the inventory, or run "
         "`tfctl up --force` to launch anyway", err=True)


@click.command()
@click.option("--timeout", type=float, default=None, help="Give up after this many seconds.")
@click.option("--notify", "notify_urls", metavar="URL", multiple=True,
              help="When it comes back, send word to URL through apprise (ntfys://TOPIC, "
                   "slack://..., mailto://..., json://HOST/PATH; repeatable). Word that needs "
                   "no client waiting: job.notify (README: Word when a run ends).")
@click.option("--run", "run_id", metavar="ID", help="Another run than the current one "
              "(`tfctl runs` lists them).")
@click.option("--json", "as_json", is_flag=True, help=JSON_HELP)
@click.pass_context
def wait(ctx: click.Context, timeout: float | None, notify_urls: tuple[str, ...],
         run_id: str | None, as_json: bool) -> None:
    """Block until the current job (or `--run ID`) ends; stop its parameter servers; exit
    with its status.

    \b
    Example:
      tfctl up && tfctl wait; echo "job exit status $?"
      tfctl wait --json | jq .exit_code
      tfctl wait --notify ntfys://my-lab-runs
      tfctl wait --run 20261123-221410-90d6
    """
    if notify_urls:
        from tfctl.tui.cli.notice import bad_urls

        unread = bad_urls(notify_urls)
        if unread:
            raise click.BadParameter(f"{unread[0]} is not a URL apprise can send to (see "
                                     "https://github.com/caronc/apprise#supported-notifications)",
                                     ctx=ctx, param_hint="'--notify'")
    with _controller(ctx) as controller, _one_line_errors(as_json):
        if run_id:
            controller.select_run(run_id)
        code, data = _wait_json(controller, timeout)
        if as_json:
            print_json(data)
        if notify_urls:
            _notify(notify_urls, data, timeout)
        sys.exit(code)


def _notify(urls: tuple[str, ...], data: dict[str, Any], timeout: float | None) -> None:
    """`wait --notify`: the word sent; a URL it could not reach is said, never fatal."""
    from tfctl.tui.cli.notice import send, words

    title, body = words(data["run_id"], data["exit_code"], data["fatal"], data["stopped"],
                        data["timed_out"], timeout)
    failed = data["run_id"] is None or data["timed_out"] or data["exit_code"] != 0
    for url in send(urls, title, body, failed):
        say(f"could not send word to {url.split('://', 1)[0]}://… (apprise)")


def _wait(controller: RunController, timeout: float | None = None) -> int:
    return _wait_json(controller, timeout)[0]


def _said_wait(result: WaitResult | None, timeout: float | None,
               first: TaskStatus | None = None, framework: str | None = None) -> int:
    """What `wait` says on stderr (in --json too), and its exit status: for a job that failed,
    the story `status` tells of the task that failed first (`first`), then the end."""
    from tfctl.tui.cli.failures import task_story

    if result is None:
        say("no run found")
        return EXIT_FAILED
    if result.timed_out:
        say(f"run {result.run_id} still running after {timeout:g} s")
        return EXIT_FAILED
    if first is not None:
        for line in task_story(first, first=True, framework=framework):
            echo(line, err=True)
    if result.fatal is not None:  # its error and hint are the story's when it is told
        say(click.style(result.fatal if first is None else result.fatal.splitlines()[0],
                        fg="red"))
    if result.stopped:
        say(f"job ended: stopped {', '.join(result.stopped)}")
    say(f"run {result.run_id} finished with exit status {result.exit_code}")
    return int(result.exit_code or 0)


def _failed_first(controller: RunController, result: WaitResult | None) -> TaskStatus | None:
    """The task that failed first, read once more from the hosts (with its log's last lines)
    when the job ended badly; None when it ended well or cannot be read."""
    from tfctl.remote.errors import RemoteError
    from tfctl.tui.cli.failures import TAIL_LINES, failed_first

    if result is None or result.timed_out or (not result.exit_code and result.fatal is None):
        return None
    try:
        report = controller.status_report(tail=TAIL_LINES)
    except RemoteError:
        return None
    return failed_first(report.status.tasks) if report is not None else None


def _wait_json(controller: RunController, timeout: float | None = None
               ) -> tuple[int, dict[str, Any]]:
    from tfctl.tui.cli.failures import story_json

    result = controller.wait(timeout, on_event=say)
    first = _failed_first(controller, result)
    framework = controller.inventory.job.framework
    code = _said_wait(result, timeout, first, framework)
    if result is None:
        return code, {"run_id": None, "ended": False, "exit_code": None, "fatal": None,
                      "stopped": [], "timed_out": False, "failed_first": None}
    return code, {"run_id": result.run_id, "ended": result.ended,
                  "exit_code": result.exit_code, "fatal": result.fatal,
                  "stopped": list(result.stopped), "timed_out": result.timed_out,
                  "failed_first": story_json(first, framework=framework)}


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option("--run", "run_id", metavar="ID", help="Another run than the current one "
              "(`tfctl runs` lists them).")
@click.pass_context
def status(ctx: click.Context, as_json: bool, run_id: str | None) -> None:
    """Every task of the current run (or `--run ID`), read live from the hosts.

    \b
    Example:
      tfctl status
      tfctl status --json | jq '.tasks[] | select(.state != "running")'
    """
    from tfctl.remote.runs.status import describe_fatal
    from tfctl.tui.cli.failures import task_story

    with _controller(ctx) as controller, _one_line_errors(as_json):
        if run_id:
            controller.select_run(run_id)
        report = controller.status_report(tail=STATUS_TAIL_LINES)
    if report is None:
        if as_json:
            click.echo(json.dumps({"run_id": None, "source": None, "job_ended": False,
                                   "exit_code": None, "fatal": None, "stopped": [],
                                   "unreachable": {}, "silences": [], "records_stopped": {},
                                   "idle": {}, "taken_back": {}, "tasks": []}, indent=2))
            return
        click.echo("no run yet: start one with `tfctl up`")
        return
    st, run, stopped = report.status, report.run, list(report.stopped)
    fatal = describe_fatal(st.fatal) if st.fatal is not None else None
    patterns = controller.inventory.job.throughput
    if as_json:
        click.echo(json.dumps({"run_id": st.run_id, "source": run.source,
                               "job_ended": st.job_ended, "exit_code": st.exit_code,
                               "fatal": fatal, "stopped": stopped,
                               "unreachable": dict(st.unreachable),
                               "hosts": st.reach(run.hosts, time.time()),
                               "silences": [s.to_json(time.time()) for s in st.silences],
                               "records_stopped": dict(st.records_stopped),
                               "idle": {h: dict(v) for h, v in st.idle.items()},
                               "taken_back": {h: dict(v) for h, v in st.taken_back.items()},
                               "tasks": [_task_json(t, patterns) for t in st.tasks]}, indent=2))
        return
    kind = next((t.session for t in st.tasks if t.session), "")  # a notebook, a shell
    click.echo(f"{kind or 'run'} {st.run_id} (from the {run.source})")
    _print_status(st, patterns)
    for t in st.tasks:  # how each failed task ended, in its own words: the error line first
        if t.failed and t.last_lines:
            click.echo("\n".join(task_story(t, keep=STATUS_TAIL_LINES,
                                             framework=controller.inventory.job.framework)))
    if fatal:
        secho(fatal, fg="red", bold=True)
    if stopped:
        click.echo(f"job ended: stopped {', '.join(stopped)}")


STATUS_TAIL_LINES = 5


def _print_status(st: RunStatus, patterns: Sequence[str] = ()) -> None:
    from tfctl.tui.cli.output import status_table

    status_table(st, patterns)


@click.command()
@click.option("--grace", type=float, default=10.0, show_default=True,
              help="Seconds between SIGTERM and SIGKILL.")
@click.option("--run", "run_id", metavar="ID", help="Another run than the current one "
              "(`tfctl runs` lists them), or a sweep (`tfctl run --each`): its running points "
              "stopped, its waiting ones cancelled.")
@click.option("--json", "as_json", is_flag=True, help=JSON_HELP)
@click.pass_context
def down(ctx: click.Context, grace: float, run_id: str | None, as_json: bool) -> None:
    """Stop exactly the current run's (or `--run ID`'s) processes on every host (TERM, grace,
    KILL, verify).

    \b
    Example:
      tfctl down
      tfctl down --grace 2
      tfctl down --json | jq -e .clean
      tfctl down --run s-20261125-181500-ab12    # a sweep: every point
    """
    from tfctl.remote.queue.ids import is_sweep

    if run_id and is_sweep(run_id):
        from tfctl.tui.cli.run import down_sweep

        down_sweep(ctx, run_id, grace, as_json)
        return
    with _controller(ctx) as controller, _one_line_errors(as_json), \
            live_steps("tfctl down", [], (), enabled=not as_json) as rows:
        if run_id:
            controller.select_run(run_id)
        summary = controller.down(grace_s=grace, on_event=None if rows is None else rows.event)
    if as_json:
        print_json(_down_json(summary))
        for exc in summary.errors.values():
            echo(error_line(exc), err=True)
        if summary.problems:
            echo(f"error: processes of run {summary.run_id} survived SIGKILL on "
                 f"{', '.join(summary.problems)}", err=True)
        if summary.errors or summary.problems:
            sys.exit(EXIT_FAILED)
        return
    if summary.run_id is None:
        click.echo("nothing to stop: no run found")
        return
    killed = summary.killed_after_grace
    if summary.stopped:
        click.echo(f"run {summary.run_id}: stopped {', '.join(summary.stopped)}"
                   + (f" (SIGKILL after {grace:g} s: {', '.join(killed)})" if killed else ""))
    elif not summary.errors:
        click.echo(f"run {summary.run_id}: nothing to stop (already down)")
    for host, r in summary.problems.items():
        secho(f"  ✖ {host}: still alive after SIGKILL: pids {list(r.remaining_pids)}; "
              f"holding GPU memory: {list(r.gpu_pids)}", err=True, fg="red")
    if summary.errors:
        report_failures(summary.errors.values())
        secho("run `tfctl down` again once those hosts are back", err=True, fg="red")
    if summary.errors or summary.problems:
        sys.exit(EXIT_FAILED)


def _down_json(summary: DownSummary) -> dict[str, Any]:
    return {"run_id": summary.run_id, "stopped": list(summary.stopped),
            "killed_after_grace": list(summary.killed_after_grace),
            "unreachable": list(summary.unreachable),
            "problems": {h: {"remaining_pids": list(r.remaining_pids),
                             "gpu_pids": list(r.gpu_pids)} for h, r in summary.problems.items()},
            "errors": {h: str(e) for h, e in summary.errors.items()}, "clean": summary.clean}
