"""`tfctl usage`: who used the lab's GPUs, how much of it idle, at what energy.

The rows come from every host's ledger (remote/agent/ledger.py, one agent request per host:
`remote.lab.ops.read_usage`), summed by `tfctl.remote.lab.usage` (pure); this module chooses
the columns, the words, the files and the exit code.
"""

from __future__ import annotations

import json
import sys
import time
from typing import TYPE_CHECKING, cast

import click

from tfctl.tui.cli.context import EXIT_FAILED, EXIT_USAGE, obj
from tfctl.tui.cli.output import print_renderable, warn

if TYPE_CHECKING:
    from rich.console import RenderableType

    from tfctl.remote.lab.usage import By, Usage


@click.command()
@click.option("--since", default="7d", show_default=True, metavar="DURATION",
              help="How far back: 7d, 36h, 2w (whole hours are counted).")
@click.option("--by", "by", type=click.Choice(["user", "host", "gpu", "day"]), default="user",
              show_default=True, help="One line per user, host, GPU or day.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@click.option("--csv", "as_csv", is_flag=True, help="Print CSV, one line per group.")
@click.option("--html", "html_dir", metavar="DIR",
              help="Also write DIR/usage.html (self-contained) and a PNG chart per user and "
                   "per host.")
@click.pass_context
def usage(ctx: click.Context, since: str, by: str, as_json: bool, as_csv: bool,
          html_dir: str | None) -> None:
    """The lab's GPU-hours per user: tfctl runs, sessions and other processes, the share held
    idle, and the energy, over every host of the inventory.

    Each host keeps a ledger beside its claims: tfctl's runs and sessions are counted by their
    watchers each second (a run cut short counts up to its end); processes tfctl did not start
    are counted by tfctl's samplers (`tfctl lab`'s, and each run's recorder), a minute for each
    minute one saw them. Held idle:
    under 5 % utilization. A host that does not answer is named and its hours left out, never
    counted as zero (exit 1). One agent request per host.

    \b
    Example:
      tfctl usage
      tfctl usage --since 30d --by day --csv > usage.csv
      tfctl usage --json | jq '.groups[] | {key, gpu_hours, idle_share}'
      tfctl usage --html /tmp/lab-usage && xdg-open /tmp/lab-usage/usage.html
    """
    from tfctl.remote.connect.fleet import Fleet
    from tfctl.remote.lab.ops import read_usage
    from tfctl.remote.lab.targets import parse_duration
    from tfctl.remote.lab.usage import usage_csv, usage_json

    if as_json and as_csv:
        click.secho("error: --json and --csv: choose one", fg="red", err=True)
        sys.exit(EXIT_USAGE)
    try:
        window_s = parse_duration(since)
    except ValueError as exc:
        click.secho(f"error: --since: {exc}", fg="red", err=True)
        sys.exit(EXIT_USAGE)
    c = obj(ctx)
    until_s = time.time()
    with Fleet(c.load(), c.ssh_options()) as fleet:
        found = read_usage(fleet, until_s - window_s, cast("By", by), until_s)
    written = None
    if html_dir is not None:
        from tfctl.tui.report.usage import write_usage_page

        written = write_usage_page(found, html_dir)
    if as_json:
        click.echo(json.dumps(dict(usage_json(found),
                                   page=None if written is None else written.page), indent=2))
    elif as_csv:
        click.echo(usage_csv(found), nl=False)
    else:
        print_renderable(usage_table(found))
    for why in found.warnings:
        warn(why)
    for host, why in found.unanswered.items():
        click.secho(f"  ✖ {host}: {why} (its hours are left out)", err=True, fg="yellow")
    if written is not None and not as_json:
        click.echo(f"usage: {written.page} ({len(written.pngs)} charts as PNG beside it)",
                   err=as_csv)
    if found.unanswered:
        sys.exit(EXIT_FAILED)


def usage_table(found: Usage) -> RenderableType:
    from rich.table import Table

    from tfctl.remote.lab.usage import KINDS, energy_words, hours_words, share_words

    table = Table(show_edge=False, pad_edge=False)
    for col in (found.by, "GPU-hours", "runs", "sessions", "other", "idle", "energy"):
        table.add_column(col, justify="left" if col == found.by else "right")
    for t in found.totals:
        table.add_row(t.key, f"{t.gpu_hours:.2f}", *(hours_words(t.by_kind[k]) for k in KINDS),
                      share_words(t.idle_share), energy_words(t))
    if not found.totals:
        table.add_row("(no GPU use recorded)", "", "", "", "", "", "")
    return table
