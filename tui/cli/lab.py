"""`tfctl lab`, `tfctl reserve`, `tfctl release`: who holds or reserves which GPU of the lab.

The rows come from `tfctl.remote.lab.view` (one agent request per host, `remote.lab.ops`), the
claims from every user's runs and reservations (docs/claims.md); this module chooses columns,
words and exit codes.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import click

from tfctl.tui.cli.context import EXIT_FAILED, EXIT_USAGE, obj
from tfctl.tui.cli.output import console, print_renderable, warn

if TYPE_CHECKING:
    from rich.console import RenderableType

    from tfctl.remote.lab.view import HostLab

COLUMNS = ("host", "gpu", "state", "who", "what", "since", "util", "mem", "note")
STATE_STYLE = {"free": "green", "reserved": "yellow", "held": "red", "cpu": "dim", "error": "red"}


def _usage(text: str) -> None:
    click.secho(f"error: {text}", fg="red", err=True)
    sys.exit(EXIT_USAGE)


def _duration(text: str, what: str) -> float:
    from tfctl.remote.lab.targets import parse_duration

    try:
        return parse_duration(text)
    except ValueError as exc:
        _usage(f"{what}: {exc}")
        raise AssertionError from exc  # not reached


def lab_table(hosts: Sequence[HostLab]) -> RenderableType:
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    from tfctl.remote.lab.view import row_cells

    table = Table(show_edge=False, pad_edge=False)
    for col in COLUMNS:
        table.add_column(col, justify="right" if col in ("gpu", "util") else "left",
                         no_wrap=col in ("host", "gpu", "state", "util", "mem"))
    for found in hosts:
        for row in found.rows:
            cells = row_cells(row, found.week_shares)
            table.add_row(row.host, "–" if row.index is None else str(row.index),
                          Text(cells["state"], style=STATE_STYLE[row.state]), cells["who"],
                          cells["what"], cells["since"], cells["util"], cells["mem"],
                          Text(cells["note"], style="yellow" if "idle" in cells["note"]
                               else "dim"))
    notes = [Text(f"⚠ {w}", style="yellow") for found in hosts for w in found.warnings]
    return Group(table, *notes)


def lab_json(hosts: Sequence[HostLab]) -> list[dict[str, Any]]:
    from tfctl.remote.lab.view import row_json

    return [row_json(row, found.week_shares) for found in hosts for row in found.rows]


@click.group(invoke_without_command=True)
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list, one object per GPU.")
@click.option("--watch", "watch_", is_flag=True, help="Refresh in place until Ctrl-C.")
@click.option("--interval", type=float, default=5.0, show_default=True,
              help="Seconds between refreshes with --watch.")
@click.option("--idle-after", "idle_after", default="10m", show_default=True, metavar="DURATION",
              help="Call a holder idle once its GPU has stayed under 5 % utilization this long "
                   "(measured on the host by a sampler the first `tfctl lab` starts).")
@click.pass_context
def lab(ctx: click.Context, as_json: bool, watch_: bool, interval: float,
        idle_after: str) -> None:
    """Every GPU of every host, one row each: free, reserved, or held — and by whom.

    A GPU is held by a tfctl run (any user's: user, run, job, since, task) or by any other
    process (user, pid, command, memory, since); reserved by `tfctl reserve` (who, until when,
    note); "idle N min" marks a holder that has kept its GPU under 5 % for --idle-after. A claim
    whose run's processes are gone is shown as stale, and never obeyed. Beside each user,
    their share of the lab's GPU time this week (`tfctl usage`). A run the lab's policy will
    stop as idle says so ("idle 1:05 — stops at 14:30 by the lab's policy"); `tfctl lab
    policy` shows the policy of each host. One agent request per host.

    \b
    Example:
      tfctl lab
      tfctl lab --watch --idle-after 30m
      tfctl lab --json | jq '.[] | select(.state == "free") | "\\(.host):\\(.gpu)"'
      tfctl lab policy
    """
    if ctx.invoked_subcommand is not None:
        return
    from tfctl.remote.connect.fleet import Fleet  # no run, no engine: not the controller's
    from tfctl.remote.lab.ops import read_lab

    threshold = _duration(idle_after, "--idle-after")
    c = obj(ctx)
    with Fleet(c.load(), c.ssh_options()) as fleet:
        if not watch_:
            hosts = read_lab(fleet, threshold)
            if as_json:
                click.echo(json.dumps(lab_json(hosts), indent=2))
                for found in hosts:
                    for w in found.warnings:
                        warn(w)
            else:
                print_renderable(lab_table(hosts))
            if any(not found.reachable for found in hosts):
                sys.exit(EXIT_FAILED)
            return
        try:
            from rich.live import Live

            with Live(auto_refresh=False, screen=False, transient=as_json,
                      console=console()) as live:
                while True:
                    hosts = read_lab(fleet, threshold)
                    if as_json:  # one JSON list per line
                        click.echo(json.dumps(lab_json(hosts)))
                    else:
                        live.update(lab_table(hosts), refresh=True)
                    time.sleep(interval)
        except KeyboardInterrupt:
            return


@lab.command("policy")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON object: each host's policy, "
                                                      "and the hosts that disagree.")
@click.pass_context
def lab_policy(ctx: click.Context, as_json: bool) -> None:
    """The lab policy in force on each host, and any host that disagrees with the others.

    Each host's administrator writes the policy in /etc/tfctl/lab.yaml (or the file the host's
    environment names in TFCTL_LAB_POLICY); tfctl trusts it only when root or the claims
    folder's owner owns it, and every user's tfctl applies it there. A host whose file is
    ignored (foreign-owned, malformed) is named with why. See docs/policy.md.

    \b
    Example:
      tfctl lab policy
      tfctl lab policy --json | jq '.hosts[] | {host, words}'
    """
    from tfctl.remote.connect.fleet import Fleet
    from tfctl.remote.lab.policy import disagreeing, disagreement_words, read_policies

    c = obj(ctx)
    with Fleet(c.load(), c.ssh_options()) as fleet:
        hosts = read_policies(fleet)
    if as_json:
        click.echo(json.dumps({"hosts": [h.to_json() for h in hosts],
                               "disagreeing": [h.host for h in disagreeing(hosts)]}, indent=2))
    else:
        width = max(len(h.host) for h in hosts)
        for h in hosts:
            where = f"  {h.path}" if h.path else ""
            click.echo(f"{h.host:<{width}}{where}  {h.words}")
        for line in [p for h in hosts for p in h.problems] + disagreement_words(hosts):
            warn(line)
    if any(h.error is not None for h in hosts):
        sys.exit(EXIT_FAILED)


def _targets(ctx: click.Context, targets: Sequence[str]) -> tuple[Any, dict[str, list[int]]]:
    from tfctl.remote.lab.targets import parse_targets

    inv = obj(ctx).load()
    try:
        return inv, parse_targets(targets, [h.name for h in inv.hosts])
    except ValueError as exc:
        _usage(str(exc))
        raise AssertionError from exc  # not reached


@click.command()
@click.argument("targets", nargs=-1, metavar="HOST:GPUS...")
@click.option("--for", "for_", metavar="DURATION", help="How long: 3d, 12h, 90m, 1d12h.")
@click.option("--note", help="Why, for the others (shown in `tfctl lab`).")
@click.option("--list", "list_", is_flag=True, help="List the reservations of every user.")
@click.option("--force", is_flag=True, help="Reserve even a GPU another user has reserved.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_context
def reserve(ctx: click.Context, targets: tuple[str, ...], for_: str | None, note: str | None,
            list_: bool, force: bool, as_json: bool) -> None:
    """Reserve GPUs for a while: other users' `up` refuses them, `tfctl lab` shows them.

    A reservation is a claim on the host with an end time and no process: it ends by itself
    when the time is up, or with `tfctl release`. Your own reservation is yours to use: your
    `up` takes those GPUs. GPUs are nvidia-smi indices, as in the inventory's `gpus:`.

    \b
    Example:
      tfctl reserve titan:2,3 gtx970:0 --for 3d --note "ICML runs"
      tfctl reserve --list
      tfctl reserve --list --json | jq '.[] | select(.user == "alice")'
    """
    if list_:
        if targets or for_:
            _usage("--list takes no HOST:GPUS and no --for")
        _list_reservations(ctx, as_json)
        return
    if not targets:
        _usage("name the GPUs to reserve as HOST:GPUS (e.g. titan:2,3), or give --list")
    if not for_:
        _usage("say for how long with --for (e.g. --for 3d)")
    _reserve(ctx, targets, _duration(str(for_), "--for"), note, force, as_json)


def _list_reservations(ctx: click.Context, as_json: bool) -> None:
    """`reserve --list`: every user's live reservations."""
    from tfctl.remote.controller import RunController
    from tfctl.remote.lab.claims import clock
    from tfctl.remote.lab.ops import list_claims, live_reservations

    c = obj(ctx)
    with RunController(c.load(), c.ssh_options()) as controller:
        found, failed = list_claims(controller.fleet)
    rows = live_reservations(found)
    if as_json:
        click.echo(json.dumps([{"host": h, "gpus": list(r.gpus), "user": r.user,
                                "since": r.since_s, "until": r.until_s, "note": r.note}
                               for h, r in rows], indent=2))
    elif not rows:
        click.echo("no reservations")
    for h, r in rows if not as_json else ():
        gpus = ",".join(map(str, r.gpus))
        click.echo(f"{h}:{gpus}  {r.user}  until {clock(r.until_s)}"
                   + (f"  {r.note}" if r.note else ""))
    for hc in found:
        for w in hc.warnings:
            warn(w)
    for host, error in failed.items():
        click.secho(f"error: {error}" if error.startswith(host) else f"error: {host}: "
                    f"{error}", fg="red", err=True)
    if failed:
        sys.exit(EXIT_FAILED)


def _reserve(ctx: click.Context, targets: Sequence[str], seconds: float, note: str | None,
             force: bool, as_json: bool) -> None:
    """Reserve `targets` for `seconds`; without `force`, nothing where another user's
    reservation holds one of them (the library's check, every host asked first)."""
    from tfctl.remote.controller import RunController
    from tfctl.remote.lab.claims import clock
    from tfctl.remote.lab.ops import check_reservable
    from tfctl.remote.lab.ops import reserve as reserve_on

    inv, wanted = _targets(ctx, targets)
    until = time.time() + seconds
    with RunController(inv, obj(ctx).ssh_options()) as controller:
        if not force:
            conflict, failed = check_reservable(controller.fleet, wanted)
            if failed:
                error = next(iter(failed.values()))
                click.secho(f"error: {error}: nothing was reserved", fg="red", err=True)
                sys.exit(EXIT_FAILED)
            if conflict is not None:
                click.secho(f"error: {conflict.words()}: nothing was reserved (`--force` "
                            "reserves it anyway)", fg="red", err=True)
                sys.exit(EXIT_FAILED)
        done = reserve_on(controller.fleet, wanted, until, note, force)
        if done.failed and done.succeeded:  # all or nothing: undo the hosts that reserved
            from tfctl.remote.lab.ops import release as release_on

            release_on(controller.fleet, {h: wanted[h] for h in done.succeeded})
            for exc in done.failed.values():
                click.secho(f"error: {exc}: nothing was reserved", fg="red", err=True)
            sys.exit(EXIT_FAILED)
    out = []
    for host, answer in done.succeeded.items():
        out.append({"host": host, "gpus": list(answer.reserved), "until": answer.until_s,
                    "note": answer.note, "user": None if answer.me is None else answer.me.user,
                    "others": list(answer.others)})
        if not as_json:
            click.echo(f"reserved {host}:{','.join(map(str, answer.reserved))} until "
                       f"{clock(answer.until_s)}" + (f" ({note})" if note else ""))
        for other in answer.others:
            what = (f"{other['user']}'s run {other['run_id']}" if other["kind"] == "run"
                    else f"{other['user']}'s reservation")
            warn(f"{host}: GPU {other['gpu']} is also claimed by {what}")
    if as_json:
        click.echo(json.dumps(out, indent=2))
    for exc in done.failed.values():
        click.secho(f"error: {exc}", fg="red", err=True)
    if done.failed:
        sys.exit(EXIT_FAILED)


@click.command()
@click.argument("targets", nargs=-1, required=True, metavar="HOST:GPUS...")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_context
def release(ctx: click.Context, targets: tuple[str, ...], as_json: bool) -> None:
    """End your reservations of these GPUs now (another user's are not yours to end).

    \b
    Example:
      tfctl release titan:2,3
      tfctl release titan:2 --json
    """
    from tfctl.remote.controller import RunController
    from tfctl.remote.lab.ops import release as release_on

    inv, wanted = _targets(ctx, targets)
    with RunController(inv, obj(ctx).ssh_options()) as controller:
        done = release_on(controller.fleet, wanted)
    out, code = [], 0
    for host, answer in done.succeeded.items():
        out.append({"host": host, "released": list(answer.released),
                    "not_reserved": list(answer.not_reserved), "others": list(answer.others)})
        if answer.released and not as_json:
            click.echo(f"released {host}:{','.join(map(str, answer.released))}")
        for other in answer.others:
            click.secho(f"error: {host}: GPU {other['gpu']} is reserved by {other['user']}, "
                        "not you: only its owner can release it", fg="red", err=True)
            code = EXIT_FAILED
        mine = [g for g in answer.not_reserved if g not in {o["gpu"] for o in answer.others}]
        if mine:
            warn(f"{host}: you had no reservation of GPU {','.join(map(str, mine))}")
    if as_json:
        click.echo(json.dumps(out, indent=2))
    for exc in done.failed.values():
        click.secho(f"error: {exc}", fg="red", err=True)
        code = EXIT_FAILED
    sys.exit(code)
