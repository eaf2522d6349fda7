"""`tfctl up --on slurm`: the job submitted to a Slurm cluster, and the same run afterwards.

The inventory's `slurm:` says where: `host: local` runs `sbatch` here, a host entry's name runs
it there over tfctl's own SSH connection. `start` syncs the code once to `slurm.workdir` (on
the cluster's shared filesystem, so every node sees it; `remote/sync/rsync.py`, the hosts'
sync), writes the script `tfctl export slurm` prints (remote/exporters/slurm.py) into
`<workdir>/.tfctl/slurm/`, runs `sbatch --parsable` there and remembers the job in the state
file beside the inventory (as a run on the hosts is remembered, `remote/runs/current.py`, with
`engine: slurm`). A `SlurmEngine` is the run's `Engine` (engine.py): `RunController` hands it
status, logs, wait and down (`slurm_read.py` reads the state), and it refuses `restart`: Slurm
restarts a job's tasks only inside the job.

`cancel` is `scancel`: Slurm signals every step (SIGTERM, SIGKILL after its `KillWait`) and the
job leaves `COMPLETING` only once every step's processes are gone, which is what `down` waits
for and verifies (no step of the job left in `squeue --steps`).
"""

from __future__ import annotations

import base64
import dataclasses
import functools
import os
import shlex
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from tfctl.inventory.errors import InventoryError
from tfctl.inventory.model import Host, Inventory, Slurm
from tfctl.inventory.plan import Plan
from tfctl.remote.connect.fleet import Fleet
from tfctl.remote.connect.transport import SshOptions, Transport, shell_path
from tfctl.remote.engines.engine import (
    DownSummary,
    EngineRefused,
    Started,
    StatusReport,
    UpOptions,
    WaitResult,
)
from tfctl.remote.engines.slurm_read import (
    SlurmJob,
    SlurmLogFollower,
    SlurmStatus,
    SlurmTask,
    read_job,
)
from tfctl.remote.errors import RemoteError
from tfctl.remote.exporters.slurm import sbatch_script
from tfctl.remote.runs.current import CurrentRun, read_state, write_state
from tfctl.remote.runs.status import TaskStatus, describe_error, describe_fatal
from tfctl.remote.sync.result import SyncResult

if TYPE_CHECKING:
    from tfctl.remote.runs.logs import LogFollower
    from tfctl.remote.runs.relaunch import RestartResult
    from tfctl.remote.runs.steps import UpHooks

Say = Callable[[str], None]
ENGINE = "slurm"
SUBMIT_HOST = "slurm"
"""The submit host's name in messages when it is this machine (`host: local`)."""


def submit_host(inv: Inventory) -> Host:
    """The host `sbatch` runs on, with the Slurm workdir as its workdir."""
    settings = inv.slurm or Slurm()
    workdir = settings.workdir or inv.hosts[0].workdir
    if settings.host == "local":
        return Host(SUBMIT_HOST, "localhost", None, None, None, "~/.ssh/known_hosts", None,
                    workdir, sys.executable, {}, (), 0, transport="local")
    if settings.host not in {h.name for h in inv.hosts}:
        raise InventoryError(inv.path, settings.line or None, "slurm.host",
                             f"no host named {settings.host!r} in the inventory",
                             "write `host: local` (sbatch runs here) or the name of a host "
                             f"entry ({', '.join(h.name for h in inv.hosts)})")
    return dataclasses.replace(inv.host(settings.host), workdir=workdir)


class SlurmEngine:
    """One Slurm job of the inventory: submit it, read it, wait for it, cancel it. The submit
    host and its connection are made on first use, so that choosing this engine reads nothing
    and a bad `slurm.host` is refused when the job is submitted."""

    def __init__(self, inventory: Inventory, options: SshOptions | None = None,
                 job: SlurmJob | None = None):
        self.inventory = inventory
        self.options = options or SshOptions()
        self.job = job

    @functools.cached_property
    def host(self) -> Host:
        return submit_host(self.inventory)

    @functools.cached_property
    def fleet(self) -> Fleet:
        return Fleet(dataclasses.replace(self.inventory, hosts=(self.host,)), self.options)

    @classmethod
    def remembered(cls, inventory: Inventory, options: SshOptions | None = None
                   ) -> SlurmEngine | None:
        """The run the state file names, when it is a Slurm run."""
        state = read_state(inventory)
        if state is None or state.get("engine") != ENGINE:
            return None
        return cls(inventory, options, job_from_state(state))

    @property
    def transport(self) -> Transport:
        return self.fleet.transport(self.host)

    @property
    def run_id(self) -> str | None:
        return self.job.run_id if self.job else None

    # -- start ------------------------------------------------------------------------------
    def take_gpus(self, inventory: Inventory, say: Say
              ) -> tuple[Inventory, dict[str, tuple[int, ...]]]:
        """Slurm gives the job its GPUs: the inventory is planned as it is."""
        return inventory, {}

    def start_steps(self, plan: Plan, options: UpOptions) -> None:
        """No rows: the submission is told in lines."""
        return None

    def start(self, plan: Plan, options: UpOptions, say: Say, hooks: UpHooks) -> Started:
        """`submit`, then the job's first read; `hooks.run_started` hears the run id once the
        job is submitted (from then on `rollback` cancels it)."""
        run_id = self.submit(plan, say, sync=options.sync)
        hooks.run_started(run_id)
        return Started(run_id, self.status())

    def submit(self, plan: Plan, say: Say, sync: bool = True) -> str:
        """Sync (once, to the shared workdir), write the script, `sbatch` it, remember it."""
        inv, host = self.inventory, self.host  # a bad `slurm.host` is refused first
        name = f".tfctl/slurm/{inv.name}.sbatch"
        script = sbatch_script(plan, name)  # bad `slurm:` settings fail before anything runs
        if sync and inv.job.sync.enabled:
            result = self.sync(say)
            say(f"{host.name}: synced {result.files_transferred} files → {result.dest}")
        wd = shell_path(host.workdir)
        # The script travels inside the command (base64), not as its stdin: one exec request,
        # however the transport feeds stdin (up to the 128 KiB a command line may hold).
        packed = base64.b64encode(script.encode()).decode()
        command = (f"mkdir -p {wd}/.tfctl/slurm && cd {wd} && printf %s {packed} | base64 -d "
                   f"> {shlex.quote(name)} && pwd && sbatch --parsable {shlex.quote(name)}")
        res = self.transport.run(command, timeout_s=120)
        lines = res.stdout.strip().splitlines()
        if not res.ok or len(lines) < 2 or not lines[-1].split(";")[0].isdigit():
            said = "\n".join(res.stderr.strip().splitlines()[-10:]) or res.tail()
            raise RemoteError(host.name, "sbatch did not take the job", said,
                              kind="sbatch")
        job_id = lines[-1].split(";")[0]
        self.job = SlurmJob(job_id, lines[0], inv.name,
                            tuple(SlurmTask(t.name, t.host) for t in plan.tasks), inv.job.style)
        remember_job(inv, self.job, host.name, plan.hosts_used)
        say(f"{host.name}: submitted Slurm job {job_id} ({len(plan.tasks)} tasks; "
            f"logs in {lines[0]}/.tfctl/slurm/{job_id}/)")
        return self.job.run_id

    def sync(self, say: Say) -> SyncResult:
        from tfctl.remote.sync.rsync import source_dir, sync_host

        inv = self.inventory
        source = source_dir(inv)
        if not os.path.isdir(source):
            raise RemoteError("local", f"sync source {source!r} is not a folder",
                              kind="sync_source")
        return sync_host(self.transport, source, inv, self.options, False,
                         lambda h, m: say(f"{h}: {m}"))

    # -- read -------------------------------------------------------------------------------
    def _job(self) -> SlurmJob:
        if self.job is None:
            raise LookupError("no Slurm job")
        return self.job

    def status(self, tail: int = 1) -> SlurmStatus:
        return read_job(self.transport, self._job(), tail)

    def status_report(self, tail: int = 1) -> StatusReport:
        found = self.status(tail)
        return StatusReport(CurrentRun(found.run_id, self.source(found), ()), found, ())

    def tasks_on(self, host: str) -> set[str]:
        """The tasks planned on host `host` (each runs on the node that stands for it)."""
        return {t.name for t in self._job().tasks if t.host == host}

    def host_status(self, host: str) -> tuple[TaskStatus, ...]:
        """The tasks planned on host `host`, wherever Slurm runs them."""
        planned = self.tasks_on(host)
        return tuple(t for t in self.status().tasks if t.name in planned)

    def log_follower(self, tasks: set[str] | None = None) -> LogFollower:
        """A `SlurmLogFollower`: `LogFollower`'s `poll` over the job's output files."""
        return SlurmLogFollower(self.transport, self._job(), tasks)  # type: ignore[return-value]

    def wait(self, timeout: float | None = None, poll_s: float = 1.0,
             on_event: Say | None = None) -> WaitResult:
        """Block until the job has ended, or `timeout` seconds pass (`timed_out`)."""
        found = self.ended(timeout, poll_s)
        if found is None:
            return WaitResult(str(self.run_id), False, timed_out=True)
        return WaitResult(found.run_id, True, found.exit_code, self.fatal_words(found))

    def ended(self, timeout: float | None = None, poll_s: float = 1.0) -> SlurmStatus | None:
        """Block until the job has ended (None after `timeout` seconds): Slurm ended it, or its
        script did and nothing but TensorBoard still runs (it may be kept until the limit)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            st = self.status()
            if st.no_answer is not None:
                pass  # ask again
            elif st.slurm_ended or (st.job_ended and all(
                    t.ended or t.type == "tensorboard" for t in st.tasks)):
                return st
            if deadline is not None and time.monotonic() > deadline:
                return None
            time.sleep(poll_s)

    @staticmethod
    def fatal_words(st: SlurmStatus) -> str | None:
        """Why the job failed, in a sentence and the failing task's cause line (or None)."""
        if not st.job_ended or st.exit_code == 0:
            return None
        job = st.run_id.removeprefix("slurm-")
        task = st.fatal if st.driver_exit is not None or st.job_state in ("COMPLETED", "FAILED") \
            else None  # Slurm ended it (time limit, cancel, a node lost): that is the cause
        if task is not None and (task.type in ("ps", "chief") or task.name == st.acting_chief):
            return describe_fatal(task)
        if task is not None:
            return (f"{task.name} on {task.host} failed ({task.describe()}): Slurm job {job} "
                    f"ended with exit status {st.exit_code}" + describe_error(task.last_lines))
        why = {"CANCELLED": "was cancelled", "TIMEOUT": "reached its time limit",
               "NODE_FAIL": "lost a node", "OUT_OF_MEMORY": "ran out of memory",
               "PREEMPTED": "was preempted"}.get(st.job_state, f"ended {st.job_state}")
        return (f"Slurm job {job} {why} (exit status {st.exit_code})"
                + describe_error(st.driver_lines[-FAILED_LINES:]))

    # -- stop -------------------------------------------------------------------------------
    def cancel(self, grace_s: float, say: Say | None = None
               ) -> tuple[tuple[str, ...], str | None]:
        """`scancel` the job, then wait until Slurm says every step ended: the tasks that were
        running, and a problem sentence if steps remain."""
        job = self._job()
        before = self.status()
        if before.slurm_ended:
            return (), None
        running = tuple(t.name for t in before.tasks if not t.ended)
        if say is not None:
            say(f"cancelling Slurm job {job.job_id} on {self.host.name} (scancel: SIGTERM to "
                "every step, SIGKILL after the cluster's KillWait)")
        res = self.transport.run(f"scancel {job.job_id}", timeout_s=60)
        if not res.ok:
            raise RemoteError(self.host.name, f"scancel {job.job_id} failed", res.tail(),
                              kind="command")
        deadline = time.monotonic() + grace_s + 120
        steps = ""
        while time.monotonic() < deadline:
            st = self.status()
            steps = self._steps(job.job_id)
            if st.slurm_ended and not steps:
                return running, None
            time.sleep(0.5)
        return running, (f"Slurm job {job.job_id} still has steps after scancel: "
                         f"{steps or 'state ' + self.status().job_state}")

    def down(self, grace_s: float = 10.0, on_event: Say | None = None) -> DownSummary:
        """`cancel` as `down` reports it: the tasks stopped, and the submit host's error if
        steps of the job remain."""
        stopped, problem = self.cancel(grace_s, on_event)
        errors: dict[str, RemoteError] = {} if problem is None else {
            self.host.name: RemoteError(self.host.name, problem, kind="stop")}
        return DownSummary(self.run_id, stopped, tuple(errors), errors=errors)

    def rollback(self, run_id: str, cause: str | None = None) -> str:
        """`scancel` the job `up --on slurm` submitted (Slurm's accounting keeps its end; `cause`
        is not recorded)."""
        if self.job is None:
            return "nothing had started"
        self.cancel(5.0)
        return f"cancelled Slurm job {run_id.removeprefix('slurm-')}"

    def restart_task(self, task: str) -> None:
        raise EngineRefused("a Slurm run's task restarts only inside its job, as `restart:` "
                            "says: `tfctl down` and `up --on slurm` again")

    def restart(self, target: str, wait_s: float | None = None) -> RestartResult:
        raise EngineRefused("a Slurm run's tasks are Slurm's to start again: `tfctl down` "
                            "and `up --on slurm`")

    @staticmethod
    def source(st: SlurmStatus) -> str:
        """Where `status` says the run came from: `state file; Slurm says PENDING (Priority)`,
        or `state file; Slurm did not answer: …` (`SlurmSilent`)."""
        if st.no_answer is not None:
            return f"state file; {st.no_answer}"
        said = f"{st.job_state} ({st.reason})" if st.reason not in ("", "None") else st.job_state
        return f"state file; Slurm says {said}"

    def _steps(self, job_id: str) -> str:
        res = self.transport.run(f"squeue -h --steps -j {job_id} -o '%i %j' 2>/dev/null",
                                 timeout_s=60)
        return " ".join(res.stdout.split()) if res.ok else ""

    def close(self) -> None:
        if "fleet" in self.__dict__:  # made on first use (functools.cached_property)
            self.fleet.close()


FAILED_LINES = 15


def remember_job(inv: Inventory, job: SlurmJob, host: str, hosts: tuple[str, ...]) -> None:
    """The user's state file of the inventory, as `current.remember` writes it, plus the job."""
    write_state(inv, {
        "run_id": job.run_id, "inventory": os.path.realpath(inv.path), "hosts": list(hosts),
        "engine": ENGINE, "job_id": job.job_id, "workdir": job.workdir, "name": job.name,
        "style": job.style, "submit_host": host,
        "tasks": [[t.name, t.host] for t in job.tasks]})


def job_from_state(state: dict[str, Any]) -> SlurmJob:
    return SlurmJob(str(state["job_id"]), str(state["workdir"]), str(state["name"]),
                    tuple(SlurmTask(str(n), str(h)) for n, h in state.get("tasks", [])),
                    str(state.get("style", "tf_config")))
