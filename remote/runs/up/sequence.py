"""`tfctl up` (and the dashboard's `u`): one sequence of phases for every host, whatever its state.

1. check (check.py): one `up_check` per host asks everything `up` must know before anything
   starts anywhere (the sync's diff, the setup cache, nvidia-smi, the task ports, free ports
   for the tasks whose port the inventory leaves out). It starts nothing.
2. the work the checks found (work.py): the sync and the setup, each only where a host needs
   it, then a second check of the hosts the setup ran on or rsync synced, so that their GPUs
   and ports are judged as they are after the setup (or a long copy), not before it. A few
   files put over the agent's session (a code change: milliseconds) change neither, so such a
   host is not checked twice. A host whose agent could not run (no Python yet: the setup may
   be what installs it) is synced and set up through the shell here and checked again; a
   `shared_fs` host is set up after the hosts whose files it sees; a host that could not be
   checked at all fails the first phase that needed it, with its own error.
3. judge: the busy GPUs (`GpusBusy` unless forced), the taken ports; the plan made again with
   the ports the hosts chose (ports.py).
4. go (start.py): one `up_go` per host and phase prepares the run, starts the tasks, waits on
   the host until they listen, and answers with the host's status.
5. the mark that the whole run is up, for the hosts' watchers: posted, not waited for.

Where nothing needs doing, each host is asked twice (a check and a start) and told once; a
changed file or two adds one request (the files), not a second check.

Why no host starts a task while another host's check could still refuse the `up` (a busy GPU, a
taken port): `up_go` is a separate request, sent only after every host's check has answered and
every answer was judged, and `up_check` cannot start anything. The barrier costs one line each
way on an open session; merging the two into one request would let a host start before a busy
GPU elsewhere was seen. With the ps first (`--ps-first`), the ps phase and the rest are two
`up_go` phases, for the same reason (a worker may start only once every ps listens, on every
host).

Any failure or Ctrl-C once the run id is chosen stops everything the run started
(`rollback.rolled_back`); a failure before it leaves nothing to stop, and frees the ports the
checks leased.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Protocol

from tfctl.inventory.plan import Plan
from tfctl.remote.connect.fleet import Fleet, FleetResult
from tfctl.remote.connect.session import agentops
from tfctl.remote.errors import RemoteError
from tfctl.remote.runs.status import RunStatus
from tfctl.remote.runs.steps import NoHooks, UpHooks
from tfctl.remote.runs.up.check import check_hosts, judge_gpus, judge_hostnames, judge_ports
from tfctl.remote.runs.up.ports import chosen_plan, moved, new_token, release_leases
from tfctl.remote.runs.up.rollback import raise_first, rolled_back
from tfctl.remote.runs.up.start import new_run_id, start_tasks
from tfctl.remote.runs.up.work import setup_phase, sync_phase
from tfctl.remote.sync.rsync import checked_source, source_listing

Say = Callable[[str], None]


class UpSettings(Protocol):
    """What of `controller.UpOptions` the sequence reads."""

    @property
    def sync(self) -> bool: ...
    @property
    def force_setup(self) -> bool: ...
    @property
    def force(self) -> bool: ...
    @property
    def ps_first(self) -> bool: ...
    @property
    def start_timeout_s(self) -> float: ...


def up(fleet: Fleet, plan: Plan, say: Say, options: UpSettings, *,
       hooks: UpHooks | None = None, prepare: bool = True) -> tuple[str, RunStatus]:
    """Start every task of `plan` as a new run: (its run id, its status, every task verified
    up). `hooks.run_started` hears the run id before any task starts (from then on, roll back).
    `prepare=False` leaves the sync and the setup out and asks only the plan's hosts (a run of
    TensorBoard alone, on hosts `up` prepared)."""
    token = new_token()  # this `up`'s lease on the ports its checks choose
    leased: list[str] = []  # the hosts whose check answered (and may hold a lease of it)
    try:
        return _up(fleet, plan, say, options, hooks or NoHooks(), prepare, token, leased)
    except BaseException:
        if leased:  # nothing started, or it was rolled back: its ports are free again
            release_leases(fleet, leased, token)
        raise


def _up(fleet: Fleet, plan: Plan, say: Say, options: UpSettings, hooks: UpHooks,
        prepare: bool, token: str, leased: list[str]) -> tuple[str, RunStatus]:
    inv = fleet.inventory
    do_sync = prepare and options.sync and inv.job.sync.enabled
    source = checked_source(inv) if do_sync else ""
    everywhere = prepare and (do_sync or bool(inv.job.setup))  # sync and setup: every host
    hosts = [h.name for h in inv.hosts] if everywhere else list(plan.hosts_used)
    with ThreadPoolExecutor(max_workers=1) as pool:  # listed while the fleet connects
        listing = pool.submit(source_listing, source, inv) if do_sync else None
        checked = check_hosts(fleet, plan, hosts, listing,
                              setup=prepare and not options.force_setup, token=token)
        leased += [h for h in checked.answers if h in plan.hosts_used]
        listed = None if listing is None else listing.result()
    synced = sync_phase(fleet, checked, listed, source, say, hooks) \
        if listed is not None else {}
    setup_logs, ran = setup_phase(fleet, checked, set(synced), options.force_setup, say, hooks) \
        if prepare else ({}, set())
    raise_first(FleetResult({}, checked.failed))  # a host no phase has needed yet
    copied = {h for h, how in synced.items() if how != "agent"}  # rsync: it may have been long
    again = [h for h in plan.hosts_used if h in copied | ran | set(checked.agentless)]
    if again:  # their GPUs and ports as they are after their sync and setup
        checked = checked.update(check_hosts(fleet, plan, again, None, setup=False,
                                             token=token))
        leased += [h for h in checked.answers if h in again and h not in leased]
        raise_first(FleetResult({}, {**checked.agentless, **checked.failed}))
    checks = checked.answers
    judge_hostnames(plan, checks)
    judge_gpus(fleet, plan, checks, options.force, say)
    run_id = new_run_id()
    hooks.run_started(run_id)
    for host in plan.hosts_used:  # a live run's tasks hold their ports; up_go refuses it too
        judge_ports(host, checks[host].ports, plan)
    planned, plan = plan, chosen_plan(plan, {h: checks[h].chosen for h in plan.hosts_used})
    if moved(planned, plan):
        say(f"ports taken elsewhere, chosen free: {', '.join(moved(planned, plan))}")
    try:
        status = start_tasks(fleet, plan, run_id, say, options.ps_first,
                             options.start_timeout_s, setup_logs, token)
    except BaseException as exc:
        raise rolled_back(fleet, plan, run_id, exc, say) from None
    for host in plan.hosts_used:
        with contextlib.suppress(RemoteError, OSError):  # the mark is a hint to the watchers
            t = fleet.transport(host)
            agentops.post_mark_up(t, t.host.workdir, run_id)
    return run_id, status

