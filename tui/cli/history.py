"""The commands about runs after the fact: `runs` (what the hosts remember), `collect` (a run's
outputs and logs home) and `report` (what a run recorded, drawn)."""

from __future__ import annotations

import json
import sys
import time
from typing import TYPE_CHECKING, Any

import click

from tfctl.tui.cli.context import EXIT_FAILED, obj
from tfctl.tui.cli.output import secho

if TYPE_CHECKING:
    from tfctl.remote.controller import RunController
    from tfctl.tui.report.build import Built


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_context
def runs(ctx: click.Context, as_json: bool) -> None:
    """Every run the hosts remember: id, start, duration, GPU-hours, energy, how it ended, tasks,
    hosts, outputs.

    GPU-hours: how long the run's tasks held their GPUs. Energy: each held GPU's power.draw
    samples, integrated, in Wh; `unknown` (and why) where a GPU reports no power, `≥` where
    samples are missing. It is the whole board's: the run's own only where it had its GPUs to
    itself (a shared GPU is named).

    \b
    Example:
      tfctl runs
      tfctl runs --json | jq '.runs[0].ended'
      tfctl runs --json | jq '.runs[] | {run_id, gpu_hours, energy_wh, energy_note}'
    """
    from tfctl.inventory.frameworks import FRAMEWORKS
    from tfctl.remote.connect.fleet import Fleet
    from tfctl.remote.history.cost import WHOLE_BOARD, hours_text
    from tfctl.remote.history.listing import list_runs

    c = obj(ctx)
    inv = c.load()
    with Fleet(inv, c.ssh_options()) as fleet:
        found, unreachable = list_runs(fleet)
    if as_json:
        click.echo(json.dumps({"runs": [r.to_json() for r in found],
                               "unreachable": unreachable}, indent=2))
        return
    if not found:
        click.echo("no runs on the hosts yet: start one with `tfctl up`")
    for run in found:
        started = time.strftime("%Y-%m-%d %H:%M", time.localtime(run.started_at or 0))
        took = "running" if run.live else (
            f"{run.duration_s:.0f} s" if run.duration_s is not None else "?")
        cost = run.cost
        held = f"{hours_text(cost.gpu_hours)} GPU-h"
        click.echo(f"{run.run_id}  {started}  {took:>9}  {held:>12}  {cost.energy_text():>11}  "
                   f"{run.ended or 'running'}")
        job = f"{FRAMEWORKS[run.framework].title}: " if run.framework in FRAMEWORKS else ""
        click.echo(f"    {job}{len(run.tasks)} tasks on {', '.join(run.hosts)} · outputs "
                   f"{', '.join(run.outputs) or '–'}")
        if run.oneoff:
            click.echo(f"    {oneoff_words(run.oneoff)}")
        note = cost.energy_note()
        if note and cost.gpus:
            click.echo(f"    {note}")
    if any(run.cost.energy_wh is not None for run in found):
        click.echo(f"note: {WHOLE_BOARD}")
    for host, why in unreachable.items():
        secho(f"  ✖ {host}: {why} (its runs are not listed)", err=True, fg="red")


def oneoff_words(oneoff: dict[str, Any]) -> str:
    """A one-off run (`tfctl run`) in words: `tfctl run: python train.py --seed 1 · sweep
    s-20261127-113333-ab12, point 1 of 6: seed=1`; a session (`tfctl notebook`, `tfctl shell`)
    by its kind: `tfctl notebook: jupyter lab`."""
    from tfctl.inventory.session import session_of

    kind = session_of(oneoff)
    words = f"tfctl {kind or 'run'}{' ' + str(oneoff['name']) if oneoff.get('name') else ''}: " \
            f"{oneoff.get('command')}"
    if oneoff.get("sweep"):
        point = " ".join(f"{k}={v}" for k, v in (oneoff.get("point") or {}).items())
        words += (f" · sweep {oneoff['sweep']}, point {int(oneoff.get('index') or 0) + 1} of "
                  f"{oneoff.get('points')}" + (f": {point}" if point else ""))
    return words


@click.command()
@click.option("--run", "run_id", metavar="ID", help="Which run (default: the current one).")
@click.pass_context
def collect(ctx: click.Context, run_id: str | None) -> None:
    """Copy each host's job outputs and run logs into runs/<run-id>/<host>/ (rsync).

    The outputs are `job.outputs` (default: the TensorBoard logdir, else `out`); the logs are
    the run's folder on the host. A second collect moves only what changed.

    \b
    Example:
      tfctl collect
      tfctl collect --run 20261123-221410-90d6 && ls runs/
    """
    from tfctl.remote.history.collect import collect as collect_run

    with _controller(ctx) as controller:
        run_id, hosts = _run_and_hosts(controller, run_id)
        result = collect_run(controller.fleet, run_id, hosts)
    for host, got in sorted(result.succeeded.items()):
        click.echo(f"{host}: {got.files_transferred} files → {got.dest}")
    for exc in result.failed.values():
        secho(f"  ✖ {exc.full()}", err=True, fg="red")
    if result.failed:
        sys.exit(EXIT_FAILED)


FINDING_MARK = {"fail": "✖", "warn": "⚠", "info": "ℹ"}


@click.command()
@click.option("--run", "run_id", metavar="ID", help="Which run (default: the current one).")
@click.option("-o", "--out", "out_dir", metavar="DIR",
              help="Where the page and PNGs go (default: runs/<run-id>/report/).")
@click.option("--json", "as_json", is_flag=True,
              help="Machine-readable: the findings, the summary, GPU-hours and energy per GPU.")
@click.pass_context
def report(ctx: click.Context, run_id: str | None, out_dir: str | None, as_json: bool) -> None:
    """A run's GPUs, speed, tasks, findings and cost: report.html (self-contained) and PNGs.

    Works for a run still going, too. The run's records come home with rsync first
    (runs/<run-id>/<host>/tfctl-run/). Its cost: the GPU-hours its tasks held and each GPU's
    energy in Wh (from nvidia-smi's power.draw; unknown, with why, where a GPU reports none).

    \b
    Example:
      tfctl report && xdg-open runs/*/report/report.html
      tfctl report --run 20261123-221410-90d6 -o /tmp/last-night
      tfctl report --json | jq '.energy_wh, .energy_note'
    """
    from tfctl.remote.history.cost import WHOLE_BOARD, energy_line
    from tfctl.tui.report.build import build_report

    with _controller(ctx) as controller:
        run_id, hosts = _run_and_hosts(controller, run_id)
        built = build_report(controller.fleet, run_id, hosts, out_dir)
    for host, why in built.missing_hosts.items():
        secho(f"  ✖ {host}: {why} (the report leaves it out)", err=True, fg="yellow")
    if as_json:
        click.echo(json.dumps(report_json(run_id, built), indent=2))
        return
    for finding in built.findings:
        click.echo(f"{FINDING_MARK.get(finding.level, '•')} {finding.text}")
    click.echo(f"cost: {energy_line(built.cost)}")
    if built.cost.energy_wh is not None:
        click.echo(f"note: {WHOLE_BOARD}")
    click.echo(f"report: {built.written.page} ({len(built.written.pngs)} figures as PNG "
               "beside it)")


def report_json(run_id: str, built: Built) -> dict[str, Any]:
    """What `report --json` prints: the run's summary, cost and findings, and the files."""
    summary = built.summary
    return {"run_id": run_id, "page": built.written.page, "pngs": list(built.written.pngs),
            "duration_s": summary.duration_s, "ended": summary.ended,
            "mean_speed": summary.mean_speed, "gpu_hours_busy": summary.gpu_hours_busy,
            "gpu_hours_idle": summary.gpu_hours_idle, "unsampled": summary.unsampled,
            **built.cost.to_json(),
            "findings": [{"level": f.level, "text": f.text} for f in built.findings],
            "missing_hosts": built.missing_hosts}


def _controller(ctx: click.Context) -> RunController:
    from tfctl.remote.controller import RunController

    c = obj(ctx)
    return RunController(c.load(), c.ssh_options())


def _run_and_hosts(controller: RunController, run_id: str | None) -> tuple[str, list[str]]:
    """`--run ID` (on the hosts that hold it), else the current run; exit 1 when there is none."""
    if run_id is not None:
        controller.select_run(run_id)
    run = controller.current()
    if run is None:
        click.echo("no run found: start one with `tfctl up`", err=True)
        sys.exit(EXIT_FAILED)
    return run.run_id, list(run.hosts)
