"""A Slurm run's state, read on the submit host: the job's state from Slurm, the tasks' from
the batch script's own output, and each task's log (one `--output` file per job step).

One shell round trip per read. `scontrol show job` answers while Slurm keeps the job
(`MinJobAge`, 300 s by default, after its end), then `sacct` where accounting runs; the batch
script's output (remote/exporters/slurm_sh.py: `started NAME on NODE`, `stopping NAME`, `NAME
ended (exit N)`, `the job has ended (exit N)`) says which task ran where and how each ended, so
a run Slurm has forgotten still reads right. Files go through `base64` (coreutils) so that any
bytes survive the shell; nothing but bash and coreutils is needed on the submit host.
"""

from __future__ import annotations

import base64
import re
import signal
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from tfctl.remote.agent.wirerecord import replace
from tfctl.remote.connect.transport import Transport, shell_path
from tfctl.remote.errors import FleetError, RemoteError
from tfctl.remote.runs.logs import LogBatch, whole_lines
from tfctl.remote.runs.status import RunStatus, TaskStatus, task_from_agent

WAITING = ("PENDING", "CONFIGURING", "REQUEUED", "REQUEUE_FED", "REQUEUE_HOLD", "RESIZING",
           "SUSPENDED")
"""Slurm job states before (or between) runs: the tasks are `starting`."""
LIVE = ("RUNNING", "COMPLETING", "STAGE_OUT", "SIGNALING", "STOPPED", "NO_ANSWER")
"""Slurm job states while its steps run; NO_ANSWER: Slurm did not answer (the job is taken to
go on: a controller restarting must not end a `wait`)."""
FAILED_TAIL_LINES = 40
"""Log lines read for a failed task: enough for failure.py to find the cause above frames."""
_STARTED = re.compile(r"^tfctl: started (\S+) on (\S+)")
_STOPPING = re.compile(r"^tfctl: stopping (\S+)")
_ENDED = re.compile(r"^tfctl: (\S+) ended \(exit (\d+)\)")
_JOB_ENDED = re.compile(r"^tfctl: the job has ended \(exit (\d+)\)")


class SlurmSilent(FleetError):
    """Slurm did not answer a read (scontrol could not reach its controller): the job's state
    is not known this time, and its tasks are taken to go on, as a controller restarting must
    not end a `wait`."""

    def __init__(self, reason: str) -> None:
        super().__init__(f"Slurm did not answer: {reason}", kind="slurm_silent")


@dataclass(frozen=True)
class SlurmTask:
    """A task of the submitted script: its name and the host its node stands for."""

    name: str
    host: str

    @property
    def stem(self) -> str:
        """Its log file's name less `.log`, as the script writes it (`worker:0` → `worker-0`)."""
        return self.name.replace(":", "-", 1)


@dataclass(frozen=True)
class SlurmJob:
    """Where a submitted job lives: Slurm's job id, the workdir (expanded), the tasks."""

    job_id: str
    workdir: str
    name: str
    tasks: tuple[SlurmTask, ...]
    style: str

    @property
    def run_id(self) -> str:
        return f"slurm-{self.job_id}"

    def log_path(self, task: SlurmTask) -> str:
        return f"{self.workdir}/.tfctl/slurm/{self.job_id}/{task.stem}.log"

    @property
    def default_output(self) -> str:
        """The batch script's own output (`#SBATCH --output=%x-%j.out` in the workdir)."""
        return f"{self.workdir}/{self.name}-{self.job_id}.out"


@dataclass(frozen=True)
class SlurmStatus(RunStatus):
    """A `RunStatus` whose end is the batch script's (it applies tfctl's end rule on the nodes)
    or Slurm's: `job_state` as Slurm says it (`UNKNOWN` once it forgot the job)."""

    job_state: str = "UNKNOWN"
    slurm_exit: str = ""
    """Slurm's `ExitCode` (`status:signal`)."""
    driver_exit: int | None = None
    """What the batch script said when it ended the job (`the job has ended (exit N)`)."""
    driver_lines: tuple[str, ...] = ()
    reason: str = ""
    """Slurm's `Reason` (why a job waits, or what ended it)."""
    no_answer: SlurmSilent | None = None
    """Slurm did not answer this read (`job_state` is NO_ANSWER): the run's failure, no host's,
    so `unreachable` (the hosts that did not answer) stays empty."""

    @property
    def slurm_ended(self) -> bool:
        """Slurm ended the job: every step and the batch script are gone."""
        return self.job_state not in (*WAITING, *LIVE)

    @property
    def job_ended(self) -> bool:
        return self.driver_exit is not None or self.slurm_ended

    @property
    def exit_code(self) -> int:
        if self.driver_exit is not None:
            return self.driver_exit
        if self.job_state == "CANCELLED":
            return 143
        code, _, sig = self.slurm_exit.partition(":")
        if sig not in ("", "0"):
            return 128 + int(sig)
        return int(code) if code.isdigit() and int(code) else (0 if self.job_state ==
                                                                "COMPLETED" else 1)

    @property
    def fatal(self) -> TaskStatus | None:
        """The task whose failure failed the job: a failed ps or chief (as on the hosts), else
        the first failed task that decides the end, else any failed task."""
        found = super().fatal
        if found is not None or not self.job_ended or self.exit_code == 0:
            return found
        return next((t for t in self.tasks if t.failed and t.type in ("chief", "worker")),
                    next((t for t in self.tasks if t.failed), None))


@dataclass
class SlurmAnswer:
    """What one read's shell program printed: scontrol's and sacct's status and text, and the
    files (the batch script's output as `@sbatch`, each task's log tail by its stem)."""

    scontrol: tuple[int, str] = (1, "")
    sacct: tuple[int, str] | None = None
    files: dict[str, str] = field(default_factory=dict)


def _b64(text: str) -> str:
    return base64.b64decode(text).decode("utf-8", "replace") if text else ""


def _parse(stdout: str) -> SlurmAnswer:
    answer = SlurmAnswer()
    for line in stdout.splitlines():
        parts = line.split(" ")
        if parts[0] == "@@scontrol" and len(parts) >= 2:
            answer.scontrol = (int(parts[1]), _b64(parts[2] if len(parts) > 2 else ""))
        elif parts[0] == "@@sacct" and len(parts) >= 2:
            answer.sacct = (int(parts[1]), _b64(parts[2] if len(parts) > 2 else ""))
        elif parts[0] == "@@file" and len(parts) >= 2:
            answer.files[parts[1]] = _b64(parts[2] if len(parts) > 2 else "")
    return answer


def job_fields(text: str) -> dict[str, str]:
    """`scontrol show job -o` as key → value (values here never hold spaces)."""
    return dict(re.findall(r"(?:^|\s)([A-Za-z:/]+)=(\S*)", text))


def _output_path_shell(job: SlurmJob) -> str:
    """Bash setting $out to the batch script's output file, from Slurm (the default else)."""
    return (f'out=$(printf %s "$info" | sed -n \'s/.*StdOut=\\([^ ]*\\).*/\\1/p\'); '
            f'[ -n "$out" ] || out={shell_path(job.default_output)}')


def read_job(t: Transport, job: SlurmJob, tail: int = 1) -> SlurmStatus:
    """The run's status, from Slurm and the files; raises RemoteError if the submit host does
    not answer."""
    asked_at = time.time()
    n = max(tail, FAILED_TAIL_LINES)
    script = [f"j={job.job_id}",
              'info=$(scontrol show job -o "$j" 2>&1); rc=$?',
              'echo "@@scontrol $rc $(printf %s "$info" | base64 -w0)"',
              'if [ $rc -ne 0 ] && command -v sacct >/dev/null; then '
              'acct=$(sacct -n -X -P -o State,ExitCode -j "$j" 2>&1); '
              'echo "@@sacct $? $(printf %s "$acct" | base64 -w0)"; fi',
              _output_path_shell(job),
              'echo "@@file @sbatch $(tail -c 262144 "$out" 2>/dev/null | base64 -w0)"']
    for task in job.tasks:
        script.append(f'echo "@@file {task.stem} $(tail -n {n} {shell_path(job.log_path(task))}'
                      ' 2>/dev/null | base64 -w0)"')
    res = t.run("\n".join(script), timeout_s=60)
    if not res.ok:
        raise RemoteError(t.host.name, f"reading Slurm job {job.job_id} failed",
                          res.tail(), kind="command")
    return status_from(job, _parse(res.stdout), tail, asked_at)


def _slurm_state(answer: SlurmAnswer) -> tuple[str, str, str]:
    """(state, ExitCode, Reason): UNKNOWN once Slurm forgot the job, NO_ANSWER (Reason: what
    scontrol said) when it did not answer."""
    rc, text = answer.scontrol
    if rc == 0:
        f = job_fields(text)
        return f.get("JobState", "UNKNOWN"), f.get("ExitCode", ""), f.get("Reason", "")
    if answer.sacct is not None and answer.sacct[0] == 0 and answer.sacct[1].strip():
        state, _, code = answer.sacct[1].strip().splitlines()[0].partition("|")
        return state.split()[0] if state else "UNKNOWN", code, ""
    if "invalid job id" in text.lower():
        return "UNKNOWN", "", ""
    return "NO_ANSWER", "", " ".join(text.split())[:200] or f"scontrol exited {rc}"


def status_from(job: SlurmJob, answer: SlurmAnswer, tail: int, asked_at: float) -> SlurmStatus:
    state, slurm_exit, reason = _slurm_state(answer)
    driver = answer.files.get("@sbatch", "").splitlines()
    started: dict[str, str] = {}
    stopping: set[str] = set()
    ended: dict[str, int] = {}
    driver_exit = None
    for line in driver:
        if m := _STARTED.match(line):
            started[m.group(1)] = m.group(2)
        elif m := _STOPPING.match(line):
            stopping.add(m.group(1))
        elif m := _ENDED.match(line):
            ended[m.group(1)] = int(m.group(2))
        elif m := _JOB_ENDED.match(line):
            driver_exit = int(m.group(1))
    if state == "UNKNOWN" and driver_exit is None and driver:
        state = "ENDED"  # Slurm forgot the job and its script never said: it was ended
    tasks = []
    for task in job.tasks:
        lines = answer.files.get(task.stem, "").splitlines()
        raw: dict[str, object] = {"name": task.name,
                                  "state": _task_state(task.name, state, started, stopping,
                                                       ended)}
        if task.name in ended:
            code = ended[task.name]
            raw["exit_code"] = code
            if raw["state"] == "killed":
                raw["signal"] = _signal_name(code - 128)
        status = task_from_agent(started.get(task.name, task.host),
                                 {**raw, "last_lines": lines})
        if not status.failed:  # a failed task keeps its longer tail, for the cause
            status = replace(status, last_lines=tuple(lines[-tail:]) if tail else ())
        tasks.append(status)
    return SlurmStatus(job.run_id, tuple(tasks), {}, None,
                       "worker:0" if job.style == "flags" else None, asked_at,
                       job_state=state, slurm_exit=slurm_exit, driver_exit=driver_exit,
                       driver_lines=tuple(driver), reason=reason,
                       no_answer=SlurmSilent(reason) if state == "NO_ANSWER" else None)


def _task_state(name: str, job_state: str, started: Mapping[str, str], stopping: set[str],
                ended: Mapping[str, int]) -> str:
    if name in ended:
        code = ended[name]
        if name in stopping or (job_state == "CANCELLED" and code >= 128):
            return "stopped"
        return "killed" if code > 128 else "exited"
    if job_state in WAITING or (job_state in LIVE and name not in started):
        return "starting"
    if job_state in LIVE:
        return "running"
    return "stopped" if job_state == "CANCELLED" else "lost"


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


class SlurmLogFollower:
    """`LogFollower`'s interface over a Slurm run's files: each task's step output, and the
    batch script's own as `sbatch` (where a task that never started says why)."""

    BATCH = "sbatch"

    def __init__(self, t: Transport, job: SlurmJob, tasks: set[str] | None = None,
                 max_bytes: int = 256 * 1024):
        self.t = t
        self.job = job
        self.tasks = tasks
        self.max_bytes = max_bytes
        self.offsets: dict[str, int] = {}
        self.partial: dict[str, str] = {}

    def _files(self) -> list[tuple[str, str | None]]:
        chosen: list[tuple[str, str | None]] = [
            (task.name, self.job.log_path(task)) for task in self.job.tasks
            if self.tasks is None or task.name in self.tasks]
        if self.tasks is None or self.BATCH in self.tasks:
            chosen.insert(0, (self.BATCH, None))  # None: the output path Slurm gives
        return chosen

    def poll(self, tail_lines: int | None = None) -> LogBatch:
        script = [f'info=$(scontrol show job -o {self.job.job_id} 2>/dev/null)',
                  _output_path_shell(self.job)]
        for i, (name, path) in enumerate(self._files()):
            f = "$out" if path is None else shell_path(path)
            if tail_lines is not None:  # the last lines: from the start of the file's end
                read, end = f'head -c "$size" {f} | tail -n {int(tail_lines)}', "$size"
            else:  # what came since the last poll, at most max_bytes of it
                read, end = f'tail -c +$((off + 1)) {f} | head -c "$n"', "$((off + n))"
            script.append(
                f'size=$(stat -c %s {f} 2>/dev/null || echo -1); off={self.offsets.get(name, 0)}'
                '; reset=0; if [ "$size" -ge 0 ]; then '
                '[ "$size" -ge "$off" ] || { off=0; reset=1; }; n=$((size - off)); '
                f'[ "$n" -le {self.max_bytes} ] || n={self.max_bytes}; '
                f'echo "@@log {i} {end} $reset $({read} | base64 -w0)"; '
                f'else echo "@@log {i} -1 0"; fi')
        res = self.t.run("\n".join(script), timeout_s=60)
        if not res.ok:
            return LogBatch(errors={self.t.host.name: res.tail() or "reading the logs failed"})
        files = self._files()
        hosts = {task.name: task.host for task in self.job.tasks}  # `sbatch`: where it runs
        batch = LogBatch()
        for line in res.stdout.splitlines():
            parts = line.split(" ")
            if parts[0] != "@@log" or len(parts) < 4 or not parts[1].isdigit():
                continue
            name = files[int(parts[1])][0]
            offset, reset = int(parts[2]), parts[3] == "1"
            if offset < 0:
                continue
            self.offsets[name] = offset
            if reset:
                self.partial.pop(name, None)
            lines = self._split(name, _b64(parts[4] if len(parts) > 4 else ""))
            if lines:
                batch.hosts[name] = hosts.get(name, self.t.host.name)
            batch.lines += [(name, text) for text in lines]
        return batch

    def _split(self, task: str, text: str) -> list[str]:
        return whole_lines(self.partial, task, text)


def task_words(tasks: Sequence[TaskStatus]) -> str:
    return ", ".join(t.name for t in tasks)
