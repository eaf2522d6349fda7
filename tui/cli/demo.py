"""`tfctl demo`: a real local cluster (1 ps + 2 workers, or a worker per GPU) on this machine."""

from __future__ import annotations

import contextlib
import functools
import signal
import sys
import time
import types
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

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
    code = EXIT_FAILED
    started = time.monotonic()
    ending = DemoEnding()
    try:
        with ending.installed():
            controller.up(UpOptions(sync=False), _say)
            _say(f"run {controller.run_id} is up")
            if use_ui:
                from tfctl.tui.cli.ui import run_app

                run_app(controller, ends_on=ENDING_SIGNALS)
            code = _follow_until_done(controller)
            _report(controller, setup.train_dir, time.monotonic() - started)
    except KeyboardInterrupt as exc:
        _say(f"interrupted ({exc})" if str(exc) else "interrupted")
        code = EXIT_INTERRUPTED
    finally:
        with ending.deferred():
            _clean_down(controller)
    sys.exit(code)


ENDING_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
"""How a demo's terminal ends it: Ctrl-C, a kill (a CI timeout), the terminal closed."""


class DemoEnding:
    """Ctrl-C, SIGTERM and SIGHUP end the demo as one: a KeyboardInterrupt (the dashboard, if
    shown, is ended as `q` ends it: ui.run_app), then its clean stop, which no later signal
    cuts short: every process the demo started (parameter server, workers, TensorBoard, the
    hosts' watchers) is stopped before it exits. SIGHUP (its terminal closed, its tmux server
    killed) first turns its output to /dev/null, where writes no longer fail. A signal the demo
    was started with ignored (`nohup tfctl demo`) stays ignored."""

    def __init__(self) -> None:
        self.stopping = False
        self.previous: dict[int, Any] = {}

    def on_signal(self, signum: int, frame: types.FrameType | None) -> None:
        from tfctl.tui.cli.interrupts import silence_terminal

        if signum == signal.SIGHUP:
            silence_terminal()
        if not self.stopping:
            self.stopping = True
            raise KeyboardInterrupt(signal.Signals(signum).name)

    @contextlib.contextmanager
    def installed(self) -> Iterator[None]:
        """The demo's handlers, over the signals not ignored, kept for its clean stop."""
        for sig in ENDING_SIGNALS:
            was = signal.getsignal(sig)
            if was != signal.SIG_IGN:
                self.previous[sig] = was
                signal.signal(sig, self.on_signal)
        yield

    @contextlib.contextmanager
    def deferred(self) -> Iterator[None]:
        """While the demo stops what it started: a signal is taken (SIGHUP's output silenced)
        and changes nothing; then the handlers the demo found are back."""
        self.stopping = True
        try:
            yield
        finally:
            for sig, was in self.previous.items():
                signal.signal(sig, was)


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
