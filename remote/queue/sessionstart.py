"""Where a session goes (`tfctl notebook`, `tfctl shell`): the code synced and set up once on
every host it may go to, N free GPUs on one of them placed from one look as `tfctl run`'s points
are (startrun.py: a starting ticket `r-…` left on those hosts meanwhile, so that other users'
placements see it), and the session started there by the caller's `start`.

With `when_free`, a session that finds no GPUs, or loses them between the look and its start
(`GpusBusy`, `RunLive`: a value of the start, never its words), waits in the lab's queue and
looks again every WHEN_FREE_POLL_S, its ticket keeping its place in line; without it, that is
`SessionRefused`. The ticket goes however the wait ends (a start, an error, Ctrl-C)."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from tfctl.inventory.model import Inventory
from tfctl.remote.connect.fleet import Fleet
from tfctl.remote.connect.transport import SshOptions
from tfctl.remote.errors import FleetError
from tfctl.remote.queue.ids import starting_id
from tfctl.remote.runs.steps import UpHooks

WHEN_FREE_POLL_S = 3.0
"""How often a session that waits for free GPUs looks again."""

Say = Callable[[str], None]
StartOn = Callable[[Fleet, str, tuple[int, ...]], str]
"""The session's own start on a host and its GPUs (a notebook's, a shell's): its run id."""


class SessionRefused(FleetError):
    """No N free GPUs on one host now, and the session may not wait (`--when-free` waits)."""

    def __init__(self, what: str) -> None:
        super().__init__(what, kind="session_refused")


@dataclass(frozen=True)
class SessionPlaced:
    """Where the session started: its host, its GPUs there, its run id."""

    host: str
    gpus: tuple[int, ...]
    run_id: str


def place_session(inv: Inventory, ssh: SshOptions, kind: str, gpus: int, hosts: Sequence[str],
                  when_free: bool, sync: bool, start: StartOn, client: str | None,
                  on_event: Say, say: Say, hooks: UpHooks | None = None) -> SessionPlaced:
    """Sync and set up `hosts`, place `gpus` GPUs on one of them (waiting with `when_free`),
    and start the session there (module doc). Raises `SessionRefused`, or the sync's, setup's
    and start's errors."""
    from tfctl.remote.controller import RunController
    from tfctl.remote.engines.engine import UpOptions
    from tfctl.remote.errors import GpusBusy, RunLive
    from tfctl.remote.oneoff import hosts_inventory
    from tfctl.remote.queue.startrun import _placed
    from tfctl.remote.queue.tickets import drop, put_count

    job = f"{inv.name}: {kind}"
    with RunController(hosts_inventory(inv, list(hosts)), ssh) as prep, \
            Fleet(inv, ssh) as lab:  # opened only where a limit counts the other hosts
        prep.setup(UpOptions(sync=sync), on_event, hooks=hooks)
        fleet = prep.fleet
        if gpus == 0:
            return SessionPlaced(hosts[0], (), start(fleet, hosts[0], ()))
        ticket = starting_id()
        for h, why in put_count(fleet, ticket, job, gpus, hosts, client).items():
            say(f"warning: {h}: cannot queue there, so the {kind} does not go there now: {why}")
        told = False
        try:
            while True:
                placement, _listed = _placed(fleet, inv, ticket, gpus, 1, list(hosts), say,
                                             lab)
                if placement.taken:
                    chosen, gpu_ids = placement.taken[0]
                    try:
                        run_id = start(fleet, chosen, tuple(gpu_ids))
                    except (GpusBusy, RunLive):
                        if not when_free:
                            raise
                        continue  # taken between the look and the start: look again
                    return SessionPlaced(chosen, tuple(gpu_ids), run_id)
                plural = "s" if gpus != 1 else ""
                if not when_free:
                    raise SessionRefused(f"no {gpus} GPU{plural} free on one host now: "
                                         f"{placement.words()}; `tfctl {kind} --when-free` "
                                         "waits for them")
                if not told:
                    say(f"waiting in the lab's queue for {gpus} free GPU{plural} "
                        f"({placement.words()}); Ctrl-C gives up")
                    told = True
                time.sleep(WHEN_FREE_POLL_S)
        finally:
            drop(fleet, ticket, list(hosts))
