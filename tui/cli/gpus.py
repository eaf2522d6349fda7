"""`tfctl gpus`: every GPU of every host, which task owns it, and what looks wrong — once or live.

The data comes from `tfctl.remote.gpus.telemetry.TelemetryStreams` (one nvidia-smi stream per
host), the owners from the agents' task pids (`tfctl.remote.gpus.owners`), the warnings from
`tfctl.remote.gpus.findings`; this module only chooses columns, colours and refresh.
"""

from __future__ import annotations

import json
import sys
import time

import click

from tfctl.tui.cli.context import EXIT_FAILED, obj
from tfctl.tui.cli.output import console, gpu_objects, gpu_table, print_renderable


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list, one object per GPU.")
@click.option("--watch", "watch_", is_flag=True, help="Refresh the table in place until Ctrl-C.")
@click.option("--interval", type=float, default=1.0, show_default=True,
              help="Seconds between samples (nvidia-smi averages over about 1 s anyway).")
@click.option("--first-sample-timeout", type=float, default=20.0, show_default=True,
              help="Seconds to wait for every host's first sample.")
@click.pass_context
def gpus(ctx: click.Context, as_json: bool, watch_: bool, interval: float,
         first_sample_timeout: float) -> None:
    """Every GPU of every host: utilization, memory, temperature, power, and its owner task.

    A GPU's owner is the run's task whose process is on it, "foreign pid N user X" for anyone
    else's process, or "idle". Hosts without nvidia-smi say "no GPUs" once.

    \b
    Example:
      tfctl gpus
      tfctl gpus --watch
      tfctl gpus --json | jq '.[] | select(.owner_kind == "foreign")'
    """
    from tfctl.remote.controller import RunController

    c = obj(ctx)
    with RunController(c.load(), c.ssh_options()) as controller:
        watch = controller.gpu_watch(interval_s=interval)
        watch.start()
        try:
            run_id = watch.run_id()
            watch.wait_first(first_sample_timeout + c.connect_timeout_s)
            watch.refresh_owners()
            if not watch_:
                snaps, now = watch.snapshots(), watch.clock()
                found = watch.findings(now, track=False)
                if as_json:
                    click.echo(json.dumps(gpu_objects(snaps, watch.owners(snaps), now,
                                                      watch.silences()), indent=2))
                else:
                    print_renderable(gpu_table(snaps, watch.owners(snaps), found, now, run_id))
                if any(s.state(now).value == "error" for s in snaps.values()):
                    sys.exit(EXIT_FAILED)
                return
            watch.refresh_owners_every()
            try:
                from rich.live import Live

                with Live(auto_refresh=False, screen=False, transient=as_json,
                          console=console()) as live:
                    while True:
                        snaps, now = watch.snapshots(), watch.clock()
                        found = watch.findings(now)  # also tracks log progress
                        owners = watch.owners(snaps)
                        if as_json:  # one JSON list per line, for `jq --seq` and friends
                            click.echo(json.dumps(gpu_objects(snaps, owners, now,
                                                              watch.silences())))
                        else:
                            live.update(gpu_table(snaps, owners, found, now, run_id), refresh=True)
                        time.sleep(interval)
            except KeyboardInterrupt:
                return
        finally:
            watch.stop()
