"""`tfctl runs`: the runs of an inventory, newest first, read from the hosts' run folders.

Each host knows its part of each run (`<workdir>/.tfctl/runs/<id>/`); a run's summary joins
them: when it started (the earliest manifest), how it ended (`finished.json`, written by the
hosts' watchers or by a client), its tasks and hosts, where its outputs are, and what its GPUs
cost (GPU-hours and energy, which each host works out from its records: agent/energy.py). A
host that does not answer is named, and the runs are listed from the others.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tfctl.remote.agent.vocab import GpuCost
from tfctl.remote.connect.fleet import Fleet
from tfctl.remote.connect.session import agentops
from tfctl.remote.history.cost import RunCost, cost_from_hosts


@dataclass
class RunSummary:
    run_id: str
    started_at: float | None = None
    finished_at: float | None = None
    live: bool = False
    ended: str | None = None
    """How it ended, in words (`worker:0 ended`, `exit 1: ps:0 failed`), None while it runs."""
    exit_code: int | None = None
    tasks: list[str] = field(default_factory=list)
    hosts: list[str] = field(default_factory=list)
    outputs: list[str] = field(default_factory=list)
    """`host:path` of each output folder."""
    gpu_costs: dict[str, list[GpuCost] | None] = field(default_factory=dict)
    """Host → what each GPU the run held there cost (None: the host did not say)."""
    oneoff: dict[str, Any] | None = None
    """A one-off command's run (`tfctl run`): its command, name, sweep and point; else None."""
    framework: str | None = None
    """The framework of the job the run is (tensorflow, torch, jax); None for a one-off's."""

    @property
    def cost(self) -> RunCost:
        """GPU-hours and energy over the hosts (cost.py)."""
        return cost_from_hosts(self.gpu_costs)

    @property
    def duration_s(self) -> float | None:
        if self.started_at is None or self.finished_at is None:
            return None
        return max(0.0, self.finished_at - self.started_at)

    def to_json(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "started_at": self.started_at,
                "finished_at": self.finished_at, "duration_s": self.duration_s,
                "live": self.live, "ended": self.ended, "exit_code": self.exit_code,
                "tasks": self.tasks, "hosts": self.hosts, "outputs": self.outputs,
                "oneoff": self.oneoff, "framework": self.framework, **self.cost.to_json()}


def list_runs(fleet: Fleet, cost: bool = True) -> tuple[list[RunSummary], dict[str, str]]:
    """The runs, newest first, and the hosts that did not answer (host → why). `cost`: with
    what each run cost, which a host works out from its records the first time it is asked of
    an ended run and keeps beside them (agent/energy.py); without, nothing is written there."""
    answers = fleet.map(lambda t: agentops.runs(t, t.host.workdir, energy=cost))
    workdirs = {h.name: h.workdir for h in fleet.inventory.hosts}
    runs = merge_runs({host: [r.to_wire() for r in found]
                       for host, found in answers.succeeded.items()}, workdirs)
    return runs, {host: str(exc) for host, exc in answers.failed.items()}


def merge_runs(by_host: Mapping[str, Sequence[Mapping[str, Any]]],
               workdirs: Mapping[str, str]) -> list[RunSummary]:
    """Pure: join each host's view of its runs into one summary per run."""
    runs: dict[str, RunSummary] = {}
    for host, found in sorted(by_host.items()):
        for raw in found:
            run = runs.setdefault(str(raw["run_id"]), RunSummary(str(raw["run_id"])))
            run.hosts.append(host)
            run.live = run.live or bool(raw.get("live"))
            created = raw.get("created_at")
            if created is not None:
                run.started_at = min(run.started_at or created, created)
            run.tasks += [str(t) for t in raw.get("tasks") or []]
            run.oneoff = run.oneoff or raw.get("oneoff")
            run.framework = run.framework or raw.get("framework")
            run.outputs += [f"{host}:{workdirs.get(host, '?')}/{o}" for o in raw.get("outputs")
                            or []]
            _take_end(run, raw.get("finished"))
            costs = raw.get("gpu_costs")
            run.gpu_costs[host] = None if costs is None else [GpuCost.from_wire(c) for c in costs]
    for run in runs.values():
        if run.live:
            run.ended, run.finished_at = None, None
        elif run.ended is None:
            run.ended = "stopped (tfctl down) or never finished"
    return sorted(runs.values(), key=lambda r: (r.started_at or 0, r.run_id), reverse=True)


def _take_end(run: RunSummary, finished: Mapping[str, Any] | None) -> None:
    if not finished:
        return
    status = finished.get("status") or {}
    at = finished.get("finished_at")
    if at is not None:
        run.finished_at = max(run.finished_at or at, at)
    code = status.get("exit_code")
    if code is not None:
        run.exit_code = code
    cause = status.get("cause")
    words = f"exit {code}" if code is not None else \
        "aborted" if status.get("state") == "aborted" else "finished"
    if cause:
        words += f": {cause}"
    if status.get("state") == "stopped" and code is None:  # its host stopped it, and says why
        words = str(cause or "stopped")
    if run.ended is None or code is not None:
        run.ended = words
