"""This machine's record of a job that waits for GPUs, and where the records are kept.

A waiting job is one of two kinds (`ids.Kind`): an `up --when-free` job (`q-…`: the inventory's
job with the `up` options it was queued with, `up_args`), or a sweep (`s-…`: `tfctl run --each`
or `run --when-free`, its points each a command on `gpus_each` GPUs of any of its hosts). Both
are kept in `~/.cache/tfctl/queue/` (`$XDG_CACHE_HOME`) as `ID.json`, beside the waiter's log
`ID.log`, and read and written as one typed record, `WaitingJob`; its JSON is what earlier
versions wrote (an `up` job's record has no `kind` key; keys this version does not know are
kept as they were).

The waiter (waiter.py) and `tfctl queue cancel` / `down --run SWEEP` both write a record: each
write replaces the file atomically, and `update` re-reads it first.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tfctl.remote.connect.transport import SshOptions
from tfctl.remote.queue.ids import RECORDED, Kind, is_record_id, kind_of
from tfctl.remote.queue.tickets import Want

if TYPE_CHECKING:
    from tfctl.inventory.oneoff import Point
    from tfctl.remote.connect.fleet import Fleet

WAITING = "waiting"
STARTED = "started"
FAILED = "failed"
CANCELLED = "cancelled"
TIMED_OUT = "timed_out"
ENDED = (STARTED, FAILED, CANCELLED, TIMED_OUT)
"""The states a waiting job ends in (a sweep's points too, each)."""

POLL_S_VAR = "TFCTL_QUEUE_POLL_S"
"""How often a waiter looks at its hosts, in seconds (default 10)."""
DEFAULT_POLL_S = 10.0


def poll_s() -> float:
    """How often a waiter started now looks at its hosts (`TFCTL_QUEUE_POLL_S`)."""
    return float(os.environ.get(POLL_S_VAR) or DEFAULT_POLL_S)


@dataclass
class WaitingPoint:
    """One point of a sweep: its command, and how far it got."""

    index: int
    argv: tuple[str, ...]
    values: dict[str, str]
    words: str
    run: dict[str, Any]
    """What its run records of itself (remote/oneoff.py's `run_record`)."""
    state: str = WAITING
    """`waiting`, `started` (with its run id, host and GPUs), `failed` (with why),
    `cancelled` or `timed_out`."""
    run_id: str | None = None
    host: str | None = None
    gpus: list[int] | None = None
    why: str | None = None
    started_at: float | None = None
    ended: str | None = None
    """How its task had already ended when its start answered (a short command), or None."""
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def point(self) -> Point:
        from tfctl.inventory.oneoff import Point

        return Point(tuple(self.argv), tuple((str(k), str(v)) for k, v in self.values.items()))

    @classmethod
    def of(cls, index: int, point: Point, run: Mapping[str, Any]) -> WaitingPoint:
        return cls(index, tuple(point.argv), dict(point.values), point.words(), dict(run))

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> WaitingPoint:
        known = {f.name for f in dataclasses.fields(cls)} - {"extra"}
        return cls(int(data["index"]), tuple(data["argv"]), dict(data.get("values") or {}),
                   str(data.get("words") or ""), dict(data.get("run") or {}),
                   str(data.get("state") or WAITING), data.get("run_id"), data.get("host"),
                   None if data.get("gpus") is None else list(data["gpus"]), data.get("why"),
                   data.get("started_at"), data.get("ended"),
                   {k: v for k, v in data.items() if k not in known})

    def to_json(self) -> dict[str, Any]:
        out = dict(self.extra, argv=list(self.argv), values=dict(self.values), words=self.words,
                   index=self.index, state=self.state, run_id=self.run_id, host=self.host,
                   gpus=self.gpus, why=self.why, run=self.run)
        if self.started_at is not None:
            out.update(started_at=self.started_at, ended=self.ended)
        return out


@dataclass
class WaitingJob:
    """A job queued from this machine, as its record holds it."""

    id: str
    kind: Kind
    inventory: str
    """The inventory's absolute path."""
    hostfile: str | None
    cwd: str
    """Where it was queued from (the waiter runs there)."""
    job: str
    """The name the hosts' tickets show."""
    client: str | None
    connect_timeout_s: float
    accept_new_host_keys: bool
    persist_s: float
    wants: dict[str, Want]
    """Host → what it waits for there (a sweep: `gpus_each` free GPUs on each of its hosts)."""
    queued_at: float
    timeout_s: float
    poll_s: float
    log: str
    state: str = WAITING
    why: str = ""
    """What it waits for now, or how it ended."""
    run_id: str | None = None
    """The run an `up` job started."""
    up_args: list[str] = field(default_factory=list)
    """An `up` job's options, as `tfctl up` takes them (upstart.py reads them)."""
    gpus_each: int = 0
    """A sweep's GPUs per point."""
    points: list[WaitingPoint] = field(default_factory=list)
    waiter_pid: int | None = None
    updated_at: float | None = None
    ended_at: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    """Keys of the record this version does not know, written back as they were."""

    @property
    def deadline(self) -> float:
        """When the wait ends, in seconds since the epoch."""
        return self.queued_at + self.timeout_s

    def waiting_points(self) -> list[WaitingPoint]:
        return [p for p in self.points if p.state == WAITING]

    def counts(self) -> str:
        """`4 started, 1 failed, 1 waiting`: a sweep's points by state."""
        found: dict[str, int] = {}
        for p in self.points:
            found[p.state] = found.get(p.state, 0) + 1
        return ", ".join(f"{n} {s}" for s, n in found.items())

    def fleet(self) -> Fleet:
        """A Fleet over the record's inventory, with the options it was queued with."""
        from tfctl.inventory.load import load_inventory
        from tfctl.remote.connect.fleet import Fleet

        return Fleet(load_inventory(self.inventory, hostfile=self.hostfile), self.ssh_options())

    def ssh_options(self) -> SshOptions:
        return SshOptions(self.connect_timeout_s, self.accept_new_host_keys, self.persist_s)

    # -- JSON, as every version wrote it ------------------------------------------------
    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> WaitingJob:
        record_id = str(data["id"])
        kind: Kind = "sweep" if data.get("kind") == "sweep" else kind_of(record_id)
        wants = {h: Want(None if w.get("gpus") is None else tuple(w["gpus"]), w.get("count"))
                 for h, w in (data.get("wants") or {}).items()}
        known = {f.name for f in dataclasses.fields(cls)} - {"extra"}
        return cls(
            record_id, kind, str(data["inventory"]), data.get("hostfile"),
            str(data.get("cwd") or os.getcwd()), str(data.get("job") or ""), data.get("client"),
            float(data.get("connect_timeout_s") or 5.0), bool(data.get("accept_new_host_keys")),
            float(data.get("persist_s") or 60.0), wants, float(data["queued_at"]),
            float(data["timeout_s"]), float(data.get("poll_s") or DEFAULT_POLL_S),
            str(data.get("log") or ""), str(data.get("state") or WAITING),
            str(data.get("why") or ""), data.get("run_id"), list(data.get("up_args") or []),
            int(data.get("gpus_each") or 0),
            [WaitingPoint.from_json(p) for p in data.get("points") or ()],
            data.get("waiter_pid") if isinstance(data.get("waiter_pid"), int) else None,
            data.get("updated_at"), data.get("ended_at"),
            {k: v for k, v in data.items() if k not in known})

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = dict(self.extra)
        out.update(id=self.id, inventory=self.inventory, hostfile=self.hostfile, cwd=self.cwd,
                   job=self.job, client=self.client, connect_timeout_s=self.connect_timeout_s,
                   accept_new_host_keys=self.accept_new_host_keys, persist_s=self.persist_s,
                   wants={h: w.to_json() for h, w in self.wants.items()},
                   queued_at=self.queued_at, timeout_s=self.timeout_s, poll_s=self.poll_s,
                   state=self.state, why=self.why, run_id=self.run_id, log=self.log)
        if self.kind == "sweep":
            out.update(kind="sweep", gpus_each=self.gpus_each,
                       points=[p.to_json() for p in self.points])
        else:
            out["up_args"] = list(self.up_args)
        for key in ("waiter_pid", "updated_at", "ended_at"):
            if getattr(self, key) is not None:
                out[key] = getattr(self, key)
        return out


# ---------------------------------------------------------------- where they are kept

def queue_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
    path = Path(base) / "tfctl" / "queue"
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    return path


def record_path(record_id: str) -> Path:
    return queue_dir() / f"{record_id}.json"


def log_path(record_id: str) -> str:
    return str(queue_dir() / f"{record_id}.log")


def read(record_id: str) -> WaitingJob | None:
    """The record of `record_id`, or None where there is none (or none that reads)."""
    if not is_record_id(record_id):
        return None
    try:
        data = json.loads(record_path(record_id).read_text())
        return WaitingJob.from_json(data) if isinstance(data, dict) else None
    except (OSError, ValueError, KeyError, TypeError):
        return None


def write(job: WaitingJob) -> None:
    """Replace the job's record atomically, stamped with the time (`updated_at`)."""
    job.updated_at = time.time()
    path = record_path(job.id)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(job.to_json(), indent=1, sort_keys=True))
    os.replace(tmp, path)


def update(job: WaitingJob, **changes: Any) -> WaitingJob:
    """The job's record as it is on disk now (another process may have written it), with
    `changes`, written."""
    found = read(job.id) or job
    for key, value in changes.items():
        setattr(found, key, value)
    write(found)
    return found


def own_jobs() -> list[WaitingJob]:
    """Every record this machine keeps, by id."""
    out = []
    paths = [p for prefix in RECORDED for p in queue_dir().glob(f"{prefix}*.json")]
    for path in sorted(paths):
        found = read(path.stem)
        if found is not None:
            out.append(found)
    return out


def waiter_alive(job: WaitingJob) -> bool:
    """Whether the record's waiter still runs: its pid, running the waiter for this job."""
    pid = job.waiter_pid
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return str(record_path(job.id)).encode() in argv

