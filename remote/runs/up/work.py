"""`up`'s work phase: the sync and the setup its check found, per host, each as the host needs it.

- The sync: a host that answered is sent what its answer says differs (`rsync.apply_diff`:
  nothing, a few files over the agent's session, or rsync for those paths); a host whose agent
  cannot run yet gets the whole tree, after a shell round trip creates its workdir
  (`rsync.shell_diff`); a `shared_fs` host is never synced (it sees a synced host's files).
- The setup: skipped where the check found it cached and nothing it reads changed; everywhere
  else the setup program runs (`setup.run_setup`, which decides for itself whether the cache
  holds, in waves: `shared_fs` hosts after the hosts whose files they see). `--force-setup`
  runs it on every host.

A host that could not be checked fails the first of these that needed it, with its own error:
the sync (`SyncFailed`) where it is synced, else the setup. `UpHooks` hear each phase's result
as they would from `tfctl setup`.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from tfctl.remote.connect.fleet import Fleet, FleetResult
from tfctl.remote.connect.session.agentops import Raw, UpCheck
from tfctl.remote.runs.setup import SetupOutcome, run_setup, setup_errors
from tfctl.remote.runs.steps import OnEvent, SyncFailed, UpHooks
from tfctl.remote.runs.up.check import Checked
from tfctl.remote.sync.put import new_sync
from tfctl.remote.sync.result import SyncResult
from tfctl.remote.sync.rsync import SourceListing, apply_diff, shared_skips, shell_diff


def sync_phase(fleet: Fleet, checked: Checked, listed: SourceListing, source: str,
               say: OnEvent, hooks: UpHooks) -> dict[str, str]:
    """Every synced host brought up to date (as `tfctl sync` would); the hosts it changed, each
    with how (`SyncResult.method`: "agent" for a few files over the agent's session, "rsync").
    Raises `SyncFailed` for the hosts it could not sync or check."""
    inv = fleet.inventory
    targets = [h.name for h in inv.hosts if not h.shared_fs]

    def progress(host: str, message: str) -> None:
        say(f"sync {host}: {message}")

    def one(t: Any) -> SyncResult:
        answer = checked.answers.get(t.host.name)
        diff = answer.sync if answer is not None else None
        if diff is None:  # its agent cannot run yet
            diff = shell_diff(t)
        return apply_diff(t, source, inv, fleet.options, False, progress, listed, diff)

    new_sync()
    done = fleet.map(one, [h for h in targets if h not in checked.failed])
    values = {**done.succeeded, **shared_skips(inv)}
    failed = {**done.failed, **{h: e for h, e in checked.failed.items() if h in targets}}
    result = FleetResult({h.name: values[h.name] for h in inv.hosts if h.name in values},
                         {h.name: failed[h.name] for h in inv.hosts if h.name in failed})
    hooks.synced(result)
    if result.failed:
        raise SyncFailed(result.failed)
    return {h: r.method for h, r in done.succeeded.items()
            if r.method not in ("unchanged", "skipped")}


def setup_phase(fleet: Fleet, checked: Checked, synced: set[str], force: bool, say: OnEvent,
                hooks: UpHooks) -> tuple[dict[str, str], set[str]]:
    """job.setup where it is not cached, its inputs were just synced, or `force`; the setup
    logs to copy into the run directories, and the hosts where the setup program ran. Raises
    the first host's error (a `SetupFailed`, or why it could not be checked)."""
    inv = fleet.inventory
    job = inv.job
    if not job.setup:
        return {}, set()
    started = time.monotonic()
    outcomes = {} if force else _cached(fleet, checked.answers, synced)
    for host in outcomes:
        say(f"setup {host}: inputs unchanged: skipped")
    rest = [h.name for h in inv.hosts if h.name not in outcomes and h.name not in checked.failed]
    ran = run_setup(fleet, force=force, progress=lambda h, m: say(f"setup {h}: {m}"),
                    hosts=rest) if rest else FleetResult({}, {})
    outcomes.update(ran.succeeded)
    failed = {**ran.failed, **checked.failed}
    result = FleetResult({h.name: outcomes[h.name] for h in inv.hosts if h.name in outcomes},
                         {h.name: failed[h.name] for h in inv.hosts if h.name in failed})
    errors = setup_errors(result)
    hooks.setup_done(result, errors, time.monotonic() - started)
    if errors:
        raise errors[0]
    logs = {h: o.log_path for h, o in result.succeeded.items() if o.ok and o.log_path}
    return logs, set(rest)


def _cached(fleet: Fleet, answers: Mapping[str, UpCheck], synced: set[str]
            ) -> dict[str, SetupOutcome]:
    """The hosts whose check found the setup cached and whose files did not change since: a
    synced host's where its sync changed nothing; a `shared_fs` host's where no host's files
    changed and no setup runs on a synced host (it may see that host's files)."""
    inv = fleet.inventory
    commands = tuple(inv.job.setup)

    def found(host: str) -> Raw:
        answer = answers.get(host)
        return (answer.setup if answer is not None else None) or {}

    def cached(host: str) -> bool:
        return bool(found(host).get("cached")) and host not in synced

    own = [h.name for h in inv.hosts if not h.shared_fs]
    skip = [h for h in own if cached(h)]
    if not synced and len(skip) == len(own):
        skip += [h.name for h in inv.hosts if h.shared_fs and cached(h.name)]
    out = {}
    for host in skip:
        cache = found(host)
        out[host] = SetupOutcome(host, "skipped", commands, cache.get("hash"),
                                 log_path=cache.get("log"), done_at=cache.get("done_at"))
    return {h.name: out[h.name] for h in inv.hosts if h.name in out}
