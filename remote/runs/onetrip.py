"""`tfctl up` in as few round trips per host as the work allows: two agent requests per host.

Every request is a fleet-wide step that waits for the slowest host, so `up` asks each host as
little as it can: two agent requests on its one session (the host side is remote/agent/up.py),
and a third that nobody waits for. Taken one by one (`steps.py`, then `launch.launch`), the
same work is up to nine such steps: the sync's diff, the setup program (a shell), nvidia-smi
(a shell), the port check, prepare, launch, wait for ports, the final status read and the setup
log's copy (a shell).

1. `up_check`: the sync's digests compared, the setup cache looked up, nvidia-smi read, the task
   ports checked, and free ports chosen for the tasks whose port the inventory does not write
   (`ports.py`; the plan is made again with them once every host answered). It starts nothing.
2. `up_go`, once every host's check is in and judged: prepare the run, start the host's tasks,
   wait (on the host, cheaply) until they listen or die, and answer with the host's status.
3. the mark that the whole run is up, for the hosts' watchers: posted, not waited for.

Only where a check finds work does that host get the step it needs: files that differ are sent
(`rsync.apply_diff`), a setup that is not cached runs (`setup.run_setup`), and then the host is
checked again, so its GPUs and ports are judged after its setup, not before it.
If any host's check fails (unreachable, no Python for the agent), `up` takes the step-by-step
path, whose errors name the step that failed; so do `shared_fs` and `transport: local` hosts.

Why no host starts a task while another host's check could still refuse the `up` (a busy GPU, a
taken port): `up_go` is a separate request, sent only after `up_check` has answered
on every host and every answer was judged, and `up_check` cannot start anything. The barrier
costs one line each way on an open session; merging the two into one request would let a host
start before a busy GPU elsewhere was seen. With the ps first (`--ps-first`), the ps phase and
the rest are two `up_go` phases, for the same reason (a worker may start only once every ps
listens, on every host).

Rollback is `launch`'s: any failure or Ctrl-C once a run id was chosen stops everything the run
started (`launch.rolled_back`). Each `up_go` waits at most `launch.WAIT_ROUND_S` before it
answers, so an interrupt is acted on within one round (a few seconds), not after the whole wait.
"""

from __future__ import annotations

import base64
import contextlib
import os
import threading
import time
import zlib
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, Protocol

from tfctl.inventory.plan import Plan
from tfctl.remote.connect import agentclient, agentops
from tfctl.remote.connect.agentops import StatusAnswer, UpCheck
from tfctl.remote.connect.fleet import Fleet, FleetResult
from tfctl.remote.errors import PortTaken, RemoteError, RunLive
from tfctl.remote.runs.launch import (
    PHASES,
    WAIT_ROUND_S,
    LaunchFailed,
    interruptible,
    judge_ports,
    judge_start,
    new_run_id,
    raise_first,
    rolled_back,
)
from tfctl.remote.runs.manifest import host_manifest
from tfctl.remote.runs.ports import (
    ask,
    chosen_plan,
    chosen_ports,
    fixed_ports,
    moved,
    new_token,
    release_leases,
)
from tfctl.remote.runs.setup import SetupOutcome, commands_digest, run_setup, setup_errors
from tfctl.remote.runs.status import RunStatus, status_from
from tfctl.remote.runs.steps import SyncFailed, UpHooks, judge_busy
from tfctl.remote.sync.result import SyncResult
from tfctl.remote.sync.rsync import SourceListing, apply_diff, source_dir, source_listing

if TYPE_CHECKING:
    from tfctl.remote.gpus.busy import BusyReport

Say = Callable[[str], None]
_NOTHING_LISTED = base64.b64encode(zlib.compress(b"[]")).decode()


class UpSettings(Protocol):
    """What of `controller.UpOptions` this path reads."""

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


def up_in_two_trips(fleet: Fleet, plan: Plan, say: Say, hooks: UpHooks, options: UpSettings,
                    on_run_id: Callable[[str], None]) -> tuple[str, RunStatus] | None:
    """`RunController.up` after its warnings: (run id, the status of the run, every task
    verified up); None when this `up` must take the step-by-step path (nothing was started):
    `--force-setup` (the setup program runs anyway), `shared_fs` or `transport: local` hosts,
    or a host whose check failed (the steps then say why, as they always did)."""
    inv = fleet.inventory
    if options.force_setup or any(h.shared_fs or h.transport == "local" for h in inv.hosts):
        return None
    do_sync = options.sync and inv.job.sync.enabled
    source = source_dir(inv)
    if do_sync and not os.path.isdir(source):
        return None
    token = new_token()  # this `up`'s lease on the ports its checks choose
    leased: list[str] = []  # the hosts whose check answered (and may hold a lease of it)
    done = None
    try:
        done = _checked_up(fleet, plan, say, hooks, options, on_run_id, token, leased)
    finally:
        if done is None and leased:  # failed or stepping aside: its ports are free again
            release_leases(fleet, leased, token)
    return done


def _checked_up(fleet: Fleet, plan: Plan, say: Say, hooks: UpHooks, options: UpSettings,
                on_run_id: Callable[[str], None], token: str,
                leased: list[str]) -> tuple[str, RunStatus] | None:
    inv = fleet.inventory
    do_sync = options.sync and inv.job.sync.enabled
    source = source_dir(inv)
    hosts = [h.name for h in inv.hosts]
    with ThreadPoolExecutor(max_workers=1) as pool:  # listed while the fleet connects
        listing = pool.submit(source_listing, source, inv) if do_sync else None
        checked = _check(fleet, plan, hosts, listing, setup=True, token=token)
    leased += [h for h in checked.succeeded if h in plan.hosts_used]
    listed = None if listing is None else listing.result()
    if checked.failed or (listed is not None and listed.entries is None):
        return None
    checks = dict(checked.succeeded)
    again = _sync(fleet, checks, listed, source, say, hooks) if listed is not None else set()
    setup_logs, ran = _setup(fleet, checks, again, say, hooks)
    recheck = [h for h in plan.hosts_used if h in again | ran]
    if recheck:  # their GPUs and ports as they are after their sync and setup
        redone = _check(fleet, plan, recheck, None, setup=False, token=token)
        raise_first(FleetResult({}, redone.failed), "check")
        checks.update(redone.succeeded)
    _judge_gpus(fleet, plan, checks, options.force, say)
    run_id = new_run_id()
    on_run_id(run_id)
    hooks.run_started(run_id)
    for host in plan.hosts_used:  # a live run's tasks hold their ports; prepare refuses it too
        judge_ports(host, checks[host].ports, plan)
    planned, plan = plan, chosen_plan(plan, {h: checks[h].chosen for h in plan.hosts_used})
    if moved(planned, plan):
        say(f"ports taken elsewhere, chosen free: {', '.join(moved(planned, plan))}")
    try:
        status = _start(fleet, plan, run_id, say, options.ps_first, options.start_timeout_s,
                        setup_logs, token)
    except BaseException as exc:
        raise rolled_back(fleet, plan, run_id, exc, say) from None
    for host in plan.hosts_used:
        with contextlib.suppress(RemoteError, OSError):  # the mark is a hint to the watchers
            t = fleet.transport(host)
            agentops.post_mark_up(t, t.host.workdir, run_id)
    return run_id, status


def _check(fleet: Fleet, plan: Plan, hosts: Sequence[str],
           listing: Future[SourceListing] | None, setup: bool,
           token: str | None = None) -> FleetResult[UpCheck]:
    job = fleet.inventory.job
    asked = {"digest": commands_digest(job.setup), "inputs": list(job.setup_inputs)} \
        if setup and job.setup else None
    tokens = _gpu_tokens(plan)

    def check(t: Any) -> UpCheck:
        name = t.host.name
        entries = None
        if listing is not None:
            agentclient.prestart(t)  # connect and start the agent while the listing finishes
            entries = listing.result().blob or _NOTHING_LISTED
        used = name in plan.hosts_used
        script = _nvsmi_script() if tokens.get(name) else None
        return agentops.up_check(t, t.host.workdir, entries=entries, setup=asked,
                                 gpus_script=script,
                                 port_numbers=fixed_ports(plan, name) if used else (),
                                 choose=ask(plan, name, token) if used else None)

    return fleet.map(check, hosts)


def _sync(fleet: Fleet, checks: Mapping[str, UpCheck], listed: SourceListing, source: str,
          say: Say, hooks: UpHooks) -> set[str]:
    """Send what differs where something does (as `tfctl sync` would); the hosts it changed."""
    inv = fleet.inventory

    def progress(host: str, message: str) -> None:
        say(f"sync {host}: {message}")

    def finish(t: Any) -> SyncResult:
        diff = checks[t.host.name].sync
        assert diff is not None  # asked for: the check had the digests
        return apply_diff(t, source, inv, fleet.options, False, progress, listed, diff)

    result = fleet.map(finish, list(checks))
    hooks.synced(result)
    if result.failed:
        raise SyncFailed(result.failed)
    return {h for h, r in result.succeeded.items() if r.method != "unchanged"}


def _setup(fleet: Fleet, checks: Mapping[str, UpCheck], synced: set[str], say: Say,
           hooks: UpHooks) -> tuple[dict[str, str], set[str]]:
    """job.setup where it is not cached (or its inputs were just synced); the setup logs to copy
    into the run directories, and the hosts where the setup program ran."""
    job = fleet.inventory.job
    if not job.setup:
        return {}, set()
    started = time.monotonic()
    outcomes: dict[str, SetupOutcome] = {}
    for host, check in checks.items():
        cached = check.setup or {}
        if host not in synced and cached.get("cached"):
            say(f"setup {host}: inputs unchanged: skipped")
            outcomes[host] = SetupOutcome(host, "skipped", tuple(job.setup), cached.get("hash"),
                                          log_path=cached.get("log"),
                                          done_at=cached.get("done_at"))
    rest = [h for h in checks if h not in outcomes]
    ran = run_setup(fleet, progress=lambda h, m: say(f"setup {h}: {m}"), hosts=rest) \
        if rest else FleetResult({}, {})
    outcomes.update(ran.succeeded)
    result = FleetResult({h: outcomes[h] for h in checks if h in outcomes}, ran.failed)
    errors = setup_errors(result)
    hooks.setup_done(result, errors, time.monotonic() - started)
    if errors:
        raise errors[0]
    logs = {h: o.log_path for h, o in result.succeeded.items() if o.ok and o.log_path}
    return logs, set(rest)


def _judge_gpus(fleet: Fleet, plan: Plan, checks: Mapping[str, UpCheck], force: bool,
                say: Say) -> None:
    """The busy-GPU check on the listings the checks brought (`GpusBusy` unless `force`)."""
    tokens = _gpu_tokens(plan)
    if not tokens:
        return
    from tfctl.remote.gpus.busy import BusyReport, judge_listing

    judged = fleet.map(lambda t: judge_listing(t, checks[t.host.name].gpus_stdout or "",
                                               tokens[t.host.name],
                                               claims=checks[t.host.name].claims),
                       list(tokens))
    report: BusyReport = BusyReport(dict(judged.succeeded), dict(judged.failed))
    judge_busy(report, force, say)


def _gpu_tokens(plan: Plan) -> dict[str, tuple[str, ...]]:
    """host → the GPUs its tasks' masks name, for the hosts where they name any (the busy-GPU
    module is loaded only for such a plan)."""
    hosts = [h for h in plan.hosts_used
             if any(t.cuda_visible_devices.strip() for t in plan.on_host(h))]
    if not hosts:
        return {}
    from tfctl.remote.gpus.busy import mask_tokens

    return {h: tokens for h in hosts if (tokens := mask_tokens(plan, h))}


def _nvsmi_script() -> str:
    from tfctl.remote.gpus.busy import nvsmi_script

    return nvsmi_script()


def _start(fleet: Fleet, plan: Plan, run_id: str, say: Say, ps_first: bool,
           timeout_s: float, setup_logs: Mapping[str, str], token: str) -> RunStatus:
    """Every task started, phase by phase, each host answering once its own are up."""
    phases = PHASES if ps_first else (tuple(t for p in PHASES for t in p),)
    hosts = list(plan.hosts_used)
    asked_at = time.time()
    answers: Mapping[str, StatusAnswer | None] = {}
    for i, phase in enumerate(phases):
        first, final = i == 0, i == len(phases) - 1
        by_host = {h: [t.name for t in plan.on_host(h) if t.type in phase] for h in hosts}
        names = [t.name for t in plan.tasks if t.type in phase]
        if names:
            say(f"starting {', '.join(names)}")
        elif not (first or final):
            continue
        asked_at = time.time()
        cancel = threading.Event()

        def go(t: Any, first: bool = first, final: bool = final,
               by_host: Mapping[str, list[str]] = by_host,
               cancel: threading.Event = cancel) -> StatusAnswer | None:
            host = t.host.name
            manifest = host_manifest(plan, host, run_id, timeout_s) if first else None
            return _go_host(t, run_id, by_host[host], manifest, setup_logs.get(host),
                            timeout_s, final, cancel,
                            chosen_ports(plan, host) if first else [], token if final else None)

        result = interruptible(lambda: fleet.map(go, hosts), cancel)
        raise_first(result, "start")
        answers = result.succeeded
    missing = [h for h, a in answers.items() if a is None]
    read = fleet.map(lambda t: agentops.status(t, t.host.workdir, run_id, tail=1), missing)
    found = {h: a for h, a in answers.items() if a is not None}
    found.update(read.succeeded)
    return status_from(fleet.inventory.job.style, run_id, found,
                       {h: str(e) for h, e in read.failed.items()}, asked_at)


def _go_host(t: Any, run_id: str, names: list[str], manifest: Mapping[str, Any] | None,
             setup_log: str | None, timeout_s: float, final: bool,
             cancel: threading.Event, verify: list[int],
             token: str | None) -> StatusAnswer | None:
    """One host's phase: prepare (with `manifest`), start `names`, and wait in rounds of at most
    WAIT_ROUND_S until each listens or ended, or the time is up; stops early (as a failure) once
    `cancel` is set. Its status when `final` and every task is up (else None). `verify`: the
    ports its check chose, refused if taken since (then nothing starts there); `token`: the
    leases the host drops once its tasks are up."""
    host = t.host
    deadline = time.monotonic() + timeout_s
    launch, pending, done = list(names), list(names), {}
    while True:
        if cancel.is_set():
            raise RemoteError(host.name, "interrupted while its tasks were starting")
        left = max(0.0, deadline - time.monotonic())
        last = left <= WAIT_ROUND_S
        try:
            answer = agentops.up_go(t, host.workdir, run_id, manifest=manifest,
                                    setup_log=setup_log, launch=launch, wait=pending,
                                    timeout_s=min(left, WAIT_ROUND_S),
                                    status_tail=1 if final else None, verify_ports=verify,
                                    lease_token=token)
        except RunLive as exc:
            raise LaunchFailed(host.name, f"run {exc.data.get('run_id', '?')} is still "
                                          "live there: run `tfctl down` first") from None
        except PortTaken as exc:
            raise LaunchFailed(host.name, f"{exc.what}: run `tfctl up` again") from None
        manifest, launch, verify = None, [], []
        done.update({n: s for n, s in answer.waited.items() if last or s.state != "timeout"})
        pending = [n for n in pending if n not in done]
        if not pending:
            judge_start(host.name, done)
            return answer.status
