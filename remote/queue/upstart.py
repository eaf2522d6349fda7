"""An `up --when-free` job's start, in the waiter's own process: the `up` it was queued with,
through `RunController` and the hosts' `Engine`, as `tfctl up` starts a run.

The job's record keeps its `up` options as `tfctl up` takes them (`up_args`: `--no-sync`,
`--start-timeout S`, `--setup`, `--ps-first`, `--only H`, `--exclude H`), so that a record
written by any version reads; `UpRequest` is those options as a value. Its start answers with an
`UpStart`: the run id, or a lost race — someone took a GPU the job wanted between the look that
said its turn had come and the start (`GpusBusy`, or `NoFreeGpus` on a `gpus: free` host),
after which the job waits again in its place — or any other failure, which ends the wait.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from tfctl.inventory.errors import InventoryError
from tfctl.remote.engines.engine import UpOptions
from tfctl.remote.errors import GpusBusy, RemoteError
from tfctl.remote.lab.freegpus import NoFreeGpus
from tfctl.remote.queue.record import WaitingJob

RACE_LOST = (GpusBusy, NoFreeGpus)
"""What `up` raises when GPUs its plan wants were taken, nothing started: a lost race."""

Say = Callable[[str], None]


@dataclass(frozen=True)
class UpRequest:
    """The `up` options a job was queued with."""

    sync: bool = True
    start_timeout_s: float = 180.0
    force_setup: bool = False
    ps_first: bool = False
    only: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()

    def options(self) -> UpOptions:
        return UpOptions(sync=self.sync, force_setup=self.force_setup, ps_first=self.ps_first,
                         start_timeout_s=self.start_timeout_s)

    def to_args(self) -> list[str]:
        """The options as `tfctl up` takes them (the record's `up_args`)."""
        return (["--no-sync"] * (not self.sync) + ["--start-timeout", f"{self.start_timeout_s:g}"]
                + ["--setup"] * self.force_setup + ["--ps-first"] * self.ps_first
                + [a for h in self.only for a in ("--only", h)]
                + [a for h in self.exclude for a in ("--exclude", h)])

    @classmethod
    def from_args(cls, args: Sequence[str]) -> UpRequest:
        """The options of a record's `up_args`; ValueError for one `up --when-free` never
        wrote."""
        sync, timeout_s, force_setup, ps_first = True, 180.0, False, False
        only: list[str] = []
        exclude: list[str] = []
        rest = list(args)
        while rest:
            arg = rest.pop(0)
            if arg == "--no-sync":
                sync = False
            elif arg == "--setup":
                force_setup = True
            elif arg == "--ps-first":
                ps_first = True
            elif arg in ("--start-timeout", "--only", "--exclude") and rest:
                value = rest.pop(0)
                if arg == "--start-timeout":
                    timeout_s = float(value)
                else:
                    (only if arg == "--only" else exclude).append(value)
            else:
                raise ValueError(f"the record's `up` option {arg!r} is not one `up --when-free` "
                                 "writes")
        return cls(sync, timeout_s, force_setup, ps_first, tuple(only), tuple(exclude))


@dataclass(frozen=True)
class UpStart:
    """How a queued job's start went: its run, a lost race, or a failure."""

    run_id: str | None = None
    lost: RemoteError | None = None
    """Its GPUs were taken between the look and the start: nothing started, it waits again."""
    error: Exception | None = None
    """Any other failure: nothing is left started, and the wait ends."""


def start_up(job: WaitingJob, say: Say) -> UpStart:
    """The job's `up`, as queued (its inventory, hostfile, `--only/--exclude` and options), on
    the hosts' engine; `say` hears its steps. Ctrl-C or SIGTERM (a KeyboardInterrupt) during the
    start rolls back what it started, then is raised."""
    from tfctl.inventory.load import load_inventory
    from tfctl.inventory.subset import SelectionError, select_hosts, split_names
    from tfctl.remote.controller import RunController

    try:
        request = UpRequest.from_args(job.up_args)
        inv = load_inventory(job.inventory, hostfile=job.hostfile)
        chosen = select_hosts(inv, split_names(request.only), split_names(request.exclude))
    except (ValueError, InventoryError, SelectionError) as exc:
        return UpStart(error=exc)
    for note in chosen.notes:
        say(f"warning: {note} (--only/--exclude)")
    with RunController(chosen.inventory, job.ssh_options()) as controller:
        try:
            return UpStart(controller.up(request.options(), say))
        except RACE_LOST as exc:
            return UpStart(lost=exc)
        except Exception as exc:  # any other failure ends the wait, said in the record
            return UpStart(error=exc)
