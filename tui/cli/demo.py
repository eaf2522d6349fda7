"""`tfctl demo`: a real local cluster (1 ps + 2 workers, or a worker per GPU) on this machine."""

from __future__ import annotations

import functools
import signal
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import click

from tfctl.tui.cli.context import EXIT_FAILED, EXIT_INTERRUPTED
from tfctl.tui.cli.output import say

if TYPE_CHECKING:
    from tfctl.remote.controller import RunController


_say = functools.partial(say, who="demo")


@click.command()
@click.option("--ui/--no-ui", default=None, help="Show the dashboard (default on a terminal) "
              "or follow the logs.")
@click.option("--steps", type=int, default=200, show_default=True, help="Training steps.")
@click.option("--dir", "directory", type=click.Path(file_okay=False, path_type=Path),
              default=None, help="The demo folder (default ./tfctl-demo); nothing is written "
              "outside it.")
def demo(ui: bool | None, steps: int, directory: Path | None) -> None:
    """Train the bundled example on a real local cluster, then stop it cleanly.

    \b
    Example:
      tfctl demo --no-ui --steps 100
      tfctl demo --dir /tmp/tfctl-demo      # then look at /tmp/tfctl-demo/cluster.yaml
    """
    from tfctl.inventory.load import load_inventory
    from tfctl.remote.controller import RunController, UpOptions
    from tfctl.tui.cli.demo_lab import default_demo_dir, prepare_demo

    setup = prepare_demo((directory or default_demo_dir()).absolute(), steps)
    what = f"{len(setup.gpus)} GPUs" if setup.gpus else "CPU only (no nvidia-smi GPUs found)"
    _say(f"{setup.dir}: {what}; inventory {setup.inventory}")
    controller = RunController(load_inventory(setup.inventory))
    use_ui = sys.stdout.isatty() if ui is None else ui
    # SIGTERM (e.g. from a CI timeout) gets the same clean stop as Ctrl-C.
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    code = EXIT_FAILED
    started = time.monotonic()
    try:
        controller.up(UpOptions(sync=False), _say)
        _say(f"run {controller.run_id} is up")
        if use_ui:
            from tfctl.tui.cli.ui import run_app

            run_app(controller)
        code = _follow_until_done(controller)
        _report(controller, setup.train_dir, time.monotonic() - started)
    except KeyboardInterrupt:
        _say("interrupted")
        code = EXIT_INTERRUPTED
    finally:
        _clean_down(controller)
    sys.exit(code)


def _follow_until_done(controller: RunController) -> int:
    """The run's lines as they come, TensorFlow's start-up notices folded (one line per task,
    remote/runs/notices.py), until the job ends; its exit status."""
    from tfctl.remote.runs.notices import NoticeFold

    follower = controller.log_follower()
    assert follower is not None
    notices = NoticeFold()
    batch = follower.poll(tail_lines=50)
    while True:
        for task, line in notices.lines(batch.lines):
            click.echo(f"{task:<13} | {line}")
        status = controller.status()
        if status is not None and status.job_ended:
            for task, line in notices.lines(follower.poll().lines):
                click.echo(f"{task:<13} | {line}")
            return status.exit_code
        time.sleep(0.5)
        batch = follower.poll()


def _report(controller: RunController, train_dir: Path, seconds: float) -> None:
    from tfctl.tui.cli.demo_lab import parse_result, summary_files

    follower = controller.log_follower({"worker:0"})
    lines = [line for _, line in follower.poll(tail_lines=200).lines] if follower else []
    result = parse_result(lines)
    ckpts, events = summary_files(train_dir)
    if result:
        click.secho(f"result: {result.get('steps')} steps, loss {result.get('loss'):.4f}, "
                    f"accuracy {result.get('accuracy'):.3f}, training {result.get('seconds'):.1f} s"
                    f" ({seconds:.1f} s in all)", fg="green", bold=True)
    else:
        click.secho("the job ended without a RESULT line: see `tfctl logs`", fg="red")
    click.echo(f"checkpoints: {train_dir / 'ckpt'} ({len(ckpts)} saved)")
    click.echo(f"TensorBoard logs: {train_dir} ({len(events)} event files) · "
               f"`tensorboard --logdir {train_dir}`")


def _clean_down(controller: RunController) -> None:
    try:
        summary = controller.down(grace_s=5.0)
    finally:
        controller.close()
    if summary.stopped:
        _say(f"stopped {', '.join(summary.stopped)}")
    _say("down: nothing of the demo is left running")
