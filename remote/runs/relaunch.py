"""Starting again what a run lost on a host: `tfctl restart HOST|TASK` and the dashboard's `r`.

A host that restarts mid-run (a power cut, a kernel update, someone's reboot) takes every process
with it and keeps the run's folder. Its tasks read `lost (host restarted at T)`: their records
are of an earlier boot (remote/agent/boot.py). Restarting them puts them back into the same run
with the records they were started from (argv, environment, GPU mask, port), so a trainer that
restores its checkpoint goes on from its last one; the host's watcher, gone with the boot, is
started again too, so the job still ends there by its rule. The host decides what is lost
(remote/agent/lost.py) and refuses the rest: a task that runs, ended, or was stopped by tfctl,
and any task of a run that has ended.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from tfctl.remote.connect.fleet import Fleet
from tfctl.remote.connect.session import agentops
from tfctl.remote.connect.session.agentops import StartState
from tfctl.remote.reach import clock_hms
from tfctl.remote.runs.status import RunStatus

START_WAIT_S = 60.0
"""How long a restart waits for the tasks it started to listen on their ports (or run)."""


class NotRestartable(LookupError):
    """The name given is no host or task of the run: one sentence."""


@dataclass(frozen=True)
class RestartResult:
    """What one host started again, and how its tasks were doing once waited for."""

    run_id: str
    host: str
    tasks: tuple[str, ...]
    host_restarted_at_s: float | None
    """When the host restarted, if that is how its tasks were lost."""
    keeper_pid: int | None
    states: Mapping[str, StartState]
    """Each task after the wait: listening or running, or how it ended, or `timeout`."""
    taken_back: tuple[str, ...] = ()
    """Tasks that ran on with no keeper (theirs was killed), which a new keeper took back."""

    @property
    def started(self) -> bool:
        return all(s.started for s in self.states.values())


def lost_words(status: RunStatus, host: str) -> str:
    """"h2 restarted at 14:02:11: ps:1, worker:1 lost; `tfctl restart h2` starts them again
    in this run", for a host with tasks lost to its restart."""
    lost = [t.name for t in status.tasks if t.host == host and t.awaits_restart]
    at = status.lost_to_restarts.get(host)
    when = f" at {clock_hms(at)}" if at is not None else ""
    return (f"{host} restarted{when}: {', '.join(lost)} lost; `tfctl restart {host}` starts "
            f"{'it' if len(lost) == 1 else 'them'} again in this run")


def target_of(status: RunStatus, hosts: Sequence[str], target: str) -> tuple[str, list[str] | None]:
    """(host, the task named) for a task, (host, None: every lost task there) for a host of the
    run; NotRestartable for a name that is neither."""
    if target in hosts:
        return target, None
    task = next((t for t in status.tasks if t.name == target), None)
    if task is not None:
        return task.host, [task.name]
    silent = f"; {', '.join(status.unreachable)} did not answer" if status.unreachable else ""
    raise NotRestartable(f"run {status.run_id} has no host or task named {target!r} (its hosts: "
                         f"{', '.join(hosts)}{silent})")


def restart_lost(fleet: Fleet, run_id: str, host: str, tasks: Sequence[str] | None,
                 wait_s: float = START_WAIT_S) -> RestartResult:
    """Start the lost `tasks` of the run on `host` again (all of them when None), then wait up
    to `wait_s` for them to listen; RemoteError when the host refuses or cannot be reached."""
    t = fleet.transport(host)
    answer = agentops.restart_lost(t, t.host.workdir, run_id, tasks)
    names = tuple(sorted(answer.tasks))
    states = agentops.wait_ports(t, t.host.workdir, run_id, names, wait_s) if wait_s > 0 else {}
    return RestartResult(run_id, host, names, answer.host_restarted_at_s, answer.keeper_pid,
                         states, tuple(answer.taken_back))
