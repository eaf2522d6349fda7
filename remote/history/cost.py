"""What a run cost, for `tfctl runs` and `tfctl report`: GPU-hours and energy, per GPU and in all.

The rules are the hosts' (`remote/agent/energy.py`: which GPUs a task held and when, the
trapezoid over the recorder's `power.draw` samples, gaps not bridged, no power said as unknown);
`runs` gets each host's `GpuCost`s from its agent, `report` computes the same from the records
`collect` brought home (`recording_cost`). Here they are joined across hosts and said in words.
Pure.

Energy is the whole board's: a run's own only where it had its GPUs to itself, so a GPU another
process used while the run held it is named (`shared_with`), and every place that shows energy
says so (`WHOLE_BOARD`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tfctl.remote.agent.energy import energy_gpu_costs, energy_task_spans
from tfctl.remote.agent.vocab import GpuCost
from tfctl.remote.history.records import RunRecording

WHOLE_BOARD = ("energy is each GPU's whole board, from nvidia-smi's power.draw while the run "
               "held it: the run's own only where it had the GPU to itself")


@dataclass(frozen=True)
class HostGpuCost:
    host: str
    cost: GpuCost

    @property
    def label(self) -> str:
        return f"{self.host} GPU {self.cost.index}"

    def to_json(self) -> dict[str, Any]:
        c = self.cost
        return {"host": self.host, "index": c.index, "name": c.name, "held_s": c.held_s,
                "gpu_hours": round(c.held_s / 3600, 4), "energy_wh": c.energy_wh,
                "energy_unknown": c.energy_unknown, "unsampled_s": c.unsampled_s,
                "shared_with": list(c.shared_with)}


@dataclass(frozen=True)
class RunCost:
    """Every GPU a run held, on the hosts that said (`missing`: the run's hosts that did not)."""

    gpus: tuple[HostGpuCost, ...] = ()
    missing: tuple[str, ...] = ()

    @property
    def gpu_hours(self) -> float | None:
        """Hours held, summed over the GPUs; None where no host of the run said."""
        if self.missing and not self.gpus:
            return None
        return round(sum(g.cost.held_s for g in self.gpus) / 3600, 4)

    @property
    def energy_wh(self) -> float | None:
        """The energy of the GPUs whose energy is known; None where none is (never 0)."""
        known = [g.cost.energy_wh for g in self.gpus if g.cost.energy_wh is not None]
        return round(sum(known), 4) if known else None

    @property
    def lower_bound(self) -> bool:
        """Some of the run's energy is not counted in `energy_wh`."""
        return self.energy_wh is not None and (bool(self.missing) or any(
            g.cost.energy_wh is None or (g.cost.unsampled_s or 0) > 0 for g in self.gpus))

    @property
    def shared(self) -> list[HostGpuCost]:
        return [g for g in self.gpus if g.cost.shared_with]

    def energy_note(self) -> str | None:
        """Why the energy is unknown or a lower bound, and which GPUs were shared; None when
        there is nothing to add to the number."""
        notes = []
        if self.energy_wh is None:
            notes.append("energy unknown (" + (self._unknowns() or self._missing() or
                                               "the run held no GPU") + ")")
        elif self.lower_bound:
            parts = [p for p in (self._unknowns(), self._gaps(), self._missing()) if p]
            notes.append("energy is a lower bound: " + "; ".join(parts))
        notes += [f"{g.label} was shared with {', '.join(g.cost.shared_with)}: its energy "
                  "includes theirs" for g in self.shared]
        return "; ".join(notes) or None

    def _unknowns(self) -> str:
        by_why: dict[str, list[str]] = {}
        for g in self.gpus:
            if g.cost.energy_unknown is not None:
                by_why.setdefault(g.cost.energy_unknown, []).append(g.label)
        return "; ".join(f"{why}: {', '.join(labels)}" for why, labels in by_why.items())

    def _gaps(self) -> str:
        return ", ".join(f"{g.label} without a power reading for {g.cost.unsampled_s:.0f} s"
                         for g in self.gpus if (g.cost.unsampled_s or 0) > 0)

    def _missing(self) -> str:
        return f"{', '.join(self.missing)} did not say" if self.missing else ""

    def energy_text(self) -> str:
        """The energy in a table's column: `2.61 Wh`, `≥2.61 Wh`, or `unknown`."""
        wh = self.energy_wh
        if wh is None:
            return "unknown"
        return f"{'≥' if self.lower_bound else ''}{wh:.2f} Wh"

    def to_json(self) -> dict[str, Any]:
        return {"gpu_hours": self.gpu_hours, "energy_wh": self.energy_wh,
                "energy_lower_bound": self.lower_bound, "energy_note": self.energy_note(),
                "gpu_costs": [g.to_json() for g in self.gpus]}


def hours_text(hours: float | None) -> str:
    """GPU-hours as a person reads them: 4 decimals under 0.01 h (a short run), else 2."""
    if hours is None:
        return "unknown"
    return f"{hours:.4f}" if hours < 0.01 else f"{hours:.2f}"


def energy_line(cost: RunCost) -> str:
    """`0.0123 GPU-hours held, energy 2.61 Wh` and, where there is one, why the energy is
    unknown or a lower bound, and which GPUs were shared."""
    hours = f"{hours_text(cost.gpu_hours)} GPU-hours held"
    note = cost.energy_note()
    if cost.energy_wh is None:
        return f"{hours}, {note}"
    line = f"{hours}, energy {cost.energy_text()}"
    return f"{line} ({note})" if note else line


def cost_from_hosts(by_host: Mapping[str, Sequence[GpuCost] | None]) -> RunCost:
    """Each host's answer joined: None from a host means it did not say (an older agent)."""
    gpus = tuple(HostGpuCost(host, c) for host, costs in sorted(by_host.items())
                 for c in sorted(costs or (), key=lambda c: c.index))
    return RunCost(gpus, tuple(sorted(h for h, costs in by_host.items() if costs is None)))


def recording_cost(record: RunRecording) -> RunCost:
    """The same numbers from a run's records brought home, host by host."""
    by_host: dict[str, Sequence[GpuCost] | None] = {}
    hosts = sorted(set(record.task_hosts.values()))
    for host in hosts:
        tracks = [g for g in record.gpus if g.host == host]
        events = [(e.task, e.kind, e.t_s) for e in record.events if e.host == host and e.task]
        last = max([t for g in tracks for t in g.t_s[-1:]] + [t for _, _, t in events],
                   default=record.started_at or 0.0)
        masks = {t: record.masks.get(t, "") for t, h in record.task_hosts.items() if h == host}
        owners = [(o.t_s, o.index, o.owner) for o in record.owners if o.host == host]
        by_host[host] = energy_gpu_costs(
            masks, energy_task_spans(events, last), record.gpu_lists.get(host, []),
            {g.index: list(zip(g.t_s, g.power_w, strict=True)) for g in tracks}, owners,
            record.unsampled.get(host))
    return cost_from_hosts(by_host)
