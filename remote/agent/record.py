"""What a run records about itself on each host, for `tfctl report` the morning after.

Part of the agent program (`__init__.py`): stdlib only, Python >= 3.8, Linux, no tfctl imports.
The run's watcher (`watch.py`) drives it, so recording needs no client connected:

- `gpus.json`: the host's GPUs once (index, uuid, name, memory total), the recording's start, and
  where no sample will be (or was) recorded, why (`unrecorded`): a report must not read an empty
  `gpu.csv` as idle GPUs.
- `gpu.csv`: one nvidia-smi stream (`-lms 1000`) for all GPUs, kept compact — a line per GPU per
  second, `seconds since start,index,util %,memory used MiB,temperature C,power W,throttle mask`,
  an empty field for a value nvidia-smi could not give (never 0). About 30 bytes a line: a
  24-hour run on a 4-GPU host is ~10 MB; the file stops growing at `GPU_LOG_CAP_BYTES` (64 MB,
  six days of 4 GPUs) and says so in `gpus.json`.
- `owners.csv`: every `OWNER_EVERY_S`, which process holds memory on which GPU:
  `seconds,index,pid,used MiB,owner` — a task of this run (`worker:0`), of another run, or
  `foreign:<user>`.
- `events.jsonl`: task starts, restarts and exits (status or signal), and the job's end.

On a full disk the records stop rather than end the watcher, and resume once there is room
(`disk.py`: `records.state` says so where it costs no room; the gap becomes a `records` event).
"""

from __future__ import annotations

import os
import time
from typing import Any

from tfctl.remote.agent.disk import RecordSpace
from tfctl.remote.agent.jsonfile import now, read_json, write_json
from tfctl.remote.agent.nvfields import (
    NVSMI_RECORD_ATTRS,
    nvsmi_error_line,
    nvsmi_next_spelling,
    nvsmi_refused_field,
    nvsmi_spellings,
)
from tfctl.remote.agent.proc import proc_tags, proc_uid, user_name
from tfctl.remote.agent.rundir import task_file
from tfctl.remote.agent.speed import SpeedReader
from tfctl.remote.agent.wire import json_dumps, which

GPU_LOG_CAP_BYTES = 64 << 20
OWNER_EVERY_S = 10.0
NVSMI_ANSWER_S = 10.0  # a one-off query that takes longer: nvidia-smi hangs (a stuck driver)
ASKED_WAIT_S = 5.0
_spaces: dict[str, RecordSpace] = {}


def space_of(run_dir: str) -> RecordSpace:
    """The one RecordSpace of this run directory in this process (the watcher's)."""
    if run_dir not in _spaces:
        _spaces[run_dir] = RecordSpace(run_dir)
    return _spaces[run_dir]


def append_record(run_dir: str, name: str, text: str) -> bool:
    """`text` appended to the record `name` while the records may be written; False when it
    was not (they are stopped, or this write was refused: then they stop)."""
    space = space_of(run_dir)
    if not space.ok:
        return False
    try:
        with open(os.path.join(run_dir, name), "a") as out:
            out.write(text)
    except OSError as exc:
        space.failed(exc, name)
        return False
    return True


class GpuRecorder:
    """One `nvidia-smi -lms 1000` stream into `gpu.csv`, and the owners every few seconds.

    It starts in a thread of its own (a hanging nvidia-smi must not hold up the watcher), finds
    the spellings the driver knows (`nvfields.py`), and writes `gpus.json`; where nothing
    will be recorded, `gpus.json` says why (`unrecorded`): nvidia-smi not found, its error (no
    GPUs, NVML failing, a property refused), or no answer."""

    def __init__(self, run_dir: str, run_id: str) -> None:
        import threading

        self.run_dir, self.run_id = run_dir, run_id
        self.nvsmi = which("nvidia-smi")
        self.started = time.time()
        self.proc: Any = None
        self.next_owners = 0.0
        self.stopped = self.asking_owners = False
        self.unrecorded: str | None = None
        """Why nothing is recorded, once known (then owners are not asked either)."""
        self.fields: list[str | None] = []
        """Per NVSMI_RECORD_ATTRS, the spelling queried, or None where the driver has none."""
        self.latest: dict[str, tuple[float, str]] = {}
        """Per GPU index, its latest sample's time and utilization ("" where it had none):
        what the lab policy's idle rule reads (idlewatch.py)."""
        self.index_of_uuid: dict[str, str] = {}
        self.asked = threading.Event()  # gpus.json holds nvidia-smi's answers
        self.on_owners: Any = None
        """Called with (time, {uuid: index}, compute-app rows) after each look at the owners
        (the ledger's count of processes tfctl did not start, ledger.py)."""
        self.lock = threading.Lock()  # between starting the stream and `stop`

    def start(self) -> None:
        """Say in gpus.json that nvidia-smi was not heard yet, and ask it in a thread."""
        import threading

        write_json(os.path.join(self.run_dir, "gpus.json"), {
            "started_at": self.started, "gpus": [],
            "unrecorded": "nvidia-smi had not answered the recorder yet"})
        threading.Thread(target=self._record, daemon=True).start()

    def _record(self) -> None:
        try:
            gpus, why = self._begin()
        except Exception as exc:
            gpus, why = [], f"the recorder failed: {exc!r}"
        info: dict[str, Any] = {
            "started_at": self.started,
            "fields": ["t_s", *(name or "" for name in self.fields)],
            "gpus": [{"index": row[0], "uuid": row[1], "name": row[2],
                      "memory_total_mib": compact(row[3])} for row in gpus if len(row) == 4]}
        if why is not None:
            info["unrecorded"] = self.unrecorded = why
        try:
            write_json(os.path.join(self.run_dir, "gpus.json"), info)
        except OSError as exc:
            space_of(self.run_dir).failed(exc, "gpus.json")
        self.asked.set()
        if why is None:
            self._stream()

    def _begin(self) -> tuple[list[list[str]], str | None]:
        """The GPU list (index, uuid, name, memory total), and why nothing will be recorded
        (None: the stream may start). One query lists the GPUs and tries the sample's fields
        in their preferred spellings; a field the driver refuses (`Field "x" is not a valid
        field to query.`) is asked again in its next spelling, or left empty."""
        if self.nvsmi is None:
            return [], "nvidia-smi was not found on the PATH"
        self.fields = [nvsmi_spellings(attr)[0] for attr in NVSMI_RECORD_ATTRS]
        for _ in range(2 * len(self.fields)):
            sampled = [name for name in self.fields if name is not None]
            rows, why = self._ask(["--query-gpu=" + ",".join(
                ["uuid", "memory.total", *sampled, "name"])])  # sampled[0] is the index
            refused = nvsmi_refused_field(why or "")
            if refused is None or refused not in self.fields[1:]:
                break
            self.fields[self.fields.index(refused)] = nvsmi_next_spelling(refused)
        if why is not None:
            return [], why if refused is None else f"nvidia-smi refused the query: {why}"
        width = 2 + len(sampled)  # the name last: the one column that may hold ", "
        listed = [[row[2], row[0], ", ".join(row[width:]), row[1]] for row in rows
                  if len(row) > width]
        self.index_of_uuid = {row[1]: row[0] for row in listed}
        return listed, None if listed else "nvidia-smi listed no GPUs"

    def _stream(self) -> None:
        import subprocess

        queried = [name for name in self.fields if name is not None]
        with self.lock:
            if self.stopped:
                return
            self.proc = subprocess.Popen(
                [str(self.nvsmi), "--query-gpu=" + ",".join(queried),
                 "--format=csv,noheader,nounits", "-lms", "1000"],
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        path = os.path.join(self.run_dir, "gpu.csv")
        written, last_error, space = 0, None, space_of(self.run_dir)
        with open(path, "a") as out:
            for line in self.proc.stdout:
                values = iter(line.strip().split(", "))
                fields = [compact(next(values, "")) if name is not None else ""
                          for name in self.fields]
                if next(values, None) is not None or not fields[0].isdigit():
                    last_error = nvsmi_error_line(line) or last_error
                    continue  # an XID message or an error line between rows
                self.latest[fields[0]] = (time.time(), fields[1])
                if not space.ok:
                    continue  # read on, so nvidia-smi never blocks; kept again with room
                row = f"{int(time.time() - self.started)},{','.join(fields)}\n"
                try:
                    out.write(row)
                    out.flush()
                except OSError as exc:
                    space.failed(exc, "gpu.csv")
                    out.seek(0, os.SEEK_END)  # what did not fit is dropped, not retried
                    continue
                written += 1
                if out.tell() > GPU_LOG_CAP_BYTES:
                    self._note("note", "gpu.csv reached its cap; later samples were not kept")
                    break
        ended_by_us = self.stopped
        self.stop()
        if not written:
            code = self.proc.wait()
            self.unrecorded = "the run ended before the first sample" if ended_by_us else \
                last_error or f"nvidia-smi -lms ended (exit status {code}) before its first sample"
            self._note("unrecorded", self.unrecorded)

    def tick(self) -> None:
        """Every OWNER_EVERY_S, record who holds each GPU: in a thread of its own, so a hanging
        nvidia-smi never holds up the watcher; not where nvidia-smi is known to fail."""
        if (self.nvsmi is None or self.unrecorded or self.asking_owners
                or time.time() < self.next_owners):
            return
        import threading

        self.next_owners = time.time() + OWNER_EVERY_S
        self.asking_owners = True
        threading.Thread(target=self._owners, daemon=True).start()

    def _owners(self) -> None:
        try:
            index_of = {row[1]: row[0] for row in
                        self._ask(["--query-gpu=index,uuid"])[0] if len(row) == 2}
            rows, _ = self._ask(["--query-compute-apps=gpu_uuid,pid,used_memory"])
            t = int(time.time() - self.started)
            lines = [f"{t},{index_of.get(row[0], '')},{row[1]},{compact(row[2])},"
                     f"{describe_owner(int(row[1]), self.run_id)}\n"
                     for row in rows if len(row) == 3 and row[1].isdigit()]
            if lines:  # dropped while the records are stopped (a full disk: disk.py)
                append_record(self.run_dir, "owners.csv", "".join(lines))
            if self.on_owners is not None:
                self.on_owners(time.time(), index_of, rows)
        finally:
            self.asking_owners = False

    def stop(self) -> None:
        """End the stream. From the watcher at the run's end: first give nvidia-smi up to
        ASKED_WAIT_S to answer the recorder, so a short run still has its GPU list."""
        self.asked.wait(ASKED_WAIT_S)  # set before the stream starts: no wait from within it
        with self.lock:
            self.stopped = True
            if self.proc is not None and self.proc.poll() is None:
                self.proc.terminate()

    def _ask(self, args: list[str]) -> tuple[list[list[str]], str | None]:
        """nvidia-smi's rows, and the error it answered instead, if any: its own words, or that
        it could not be run or did not answer."""
        import subprocess

        argv = [str(self.nvsmi), *args, "--format=csv,noheader,nounits"]
        try:
            done = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                  text=True, timeout=NVSMI_ANSWER_S)
        except subprocess.TimeoutExpired:
            return [], f"nvidia-smi did not answer in {NVSMI_ANSWER_S:.0f} s"
        except OSError as exc:
            return [], f"nvidia-smi could not be run: {exc.strerror or exc}"
        error = nvsmi_error_line(done.stdout)
        if error is None and done.returncode != 0:
            tail = done.stdout.strip().splitlines()[-1:] or [""]
            error = f"nvidia-smi exited {done.returncode}: {tail[0]}".rstrip(": ")
        if error is not None:
            return [], error
        return [line.split(", ") for line in done.stdout.splitlines() if ", " in line], None

    def _note(self, key: str, text: str) -> None:
        path = os.path.join(self.run_dir, "gpus.json")
        data = read_json(path) or {}
        data[key] = text
        try:
            write_json(path, data)
        except OSError as exc:
            space_of(self.run_dir).failed(exc, "gpus.json")


def compact(value: str) -> str:
    """nvidia-smi's value, or "" where it has none (`[N/A]`, `[Not Supported]`, …)."""
    value = value.strip()
    return "" if value.startswith("[") or value in ("N/A", "") else value


def describe_owner(pid: int, run_id: str) -> str:
    run, task = proc_tags(pid)
    if run == run_id and task:
        return task
    if run:
        return f"run:{run}:{task}"
    return f"foreign:{user_name(proc_uid(pid)) or '?'}"


class EventLog:
    """Task starts, restarts and ends, seen in the keeper's records, into events.jsonl."""

    def __init__(self, run_dir: str, names: list[str]) -> None:
        self.run_dir, self.names = run_dir, names
        self.seen: dict[str, tuple[Any, ...]] = {}

    def tick(self) -> None:
        ended = space_of(self.run_dir).check()  # each tick: the records stop or resume here
        if ended is not None:
            self.write({"event": "records", "stopped_at": ended["since"], "why": ended["why"],
                        "resumed_at": ended["resumed_at"]})
        for name in self.names:
            pid_rec = read_json(task_file(self.run_dir, name, ".pid.json")) or {}
            exit_rec = read_json(task_file(self.run_dir, name, ".exit.json"))
            state = (pid_rec.get("pid"), pid_rec.get("restarts"), exit_rec is not None)
            if state == self.seen.get(name, (None, None, False)):
                continue
            before = self.seen.get(name)
            self.seen[name] = state
            if exit_rec is not None:  # `stopped`: tfctl ended it (down, or the job's end)
                stopped = os.path.exists(task_file(self.run_dir, name, ".stopped"))
                self.write({"t": exit_rec.get("ended_at"), "task": name,
                            "event": "stopped" if stopped else "exit",
                            "exit_code": exit_rec.get("exit_code"),
                            "signal": exit_rec.get("signal"), "error": exit_rec.get("error")})
            elif pid_rec.get("pid") is not None:
                restart = bool(pid_rec.get("restarts")) and before is not None
                self.write({"t": pid_rec.get("started_at"), "task": name,
                            "event": "restart" if restart else "start",
                            "restarts": pid_rec.get("restarts"),
                            "after": pid_rec.get("last_exit")})

    def write(self, event: dict[str, Any]) -> None:
        event.setdefault("t", now())
        append_record(self.run_dir, "events.jsonl", json_dumps(event) + "\n")


class ThroughputTail:
    """Reads what each training task logged since the last look; writes `throughput.csv` lines
    `seconds since start,task,value,unit` for every line that states a speed (`speed.py`)."""

    def __init__(self, run_dir: str, names: list[str], patterns: list[str],
                 started: float) -> None:
        self.run_dir, self.names, self.started = run_dir, names, started
        self.reader = SpeedReader(patterns)
        self.offsets = {name: 0 for name in names}

    def tick(self) -> None:
        rows = []
        t = int(time.time() - self.started)
        for name in self.names:
            path = task_file(self.run_dir, name, ".log")
            try:
                with open(path, "rb") as log:
                    if os.fstat(log.fileno()).st_size < self.offsets[name]:
                        self.offsets[name] = 0  # rotated (tasklog.py's TaskLog): a new file
                    log.seek(self.offsets[name])
                    data = log.read(1 << 20)
            except OSError:
                continue
            end = data.rfind(b"\n") + 1  # whole lines only; the rest next time
            self.offsets[name] += end
            for line in data[:end].decode("utf-8", "replace").splitlines():
                found = self.value(line)
                if found is not None:
                    rows.append(f"{t},{name},{found[0]:g},{found[1]}\n")
        if rows:
            append_record(self.run_dir, "throughput.csv", "".join(rows))

    def value(self, line: str) -> tuple[float, str] | None:
        return self.reader.value(line)
