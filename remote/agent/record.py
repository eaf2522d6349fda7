"""What a run records about itself on each host, for `tfctl report` the morning after.

Part of the agent program (see `main.py`): stdlib only, Python >= 3.8, Linux, no tfctl imports.
The run's watcher (`watch.py`) drives it, so recording needs no client connected:

- `gpus.json`: the host's GPUs once (index, uuid, name, memory total), and the recording's start.
- `gpu.csv`: one nvidia-smi stream (`-lms 1000`) for all GPUs, kept compact — a line per GPU per
  second, `seconds since start,index,util %,memory used MiB,temperature C,power W,throttle mask`,
  an empty field for a value nvidia-smi could not give (never 0). About 30 bytes a line: a
  24-hour run on a 4-GPU host is ~10 MB; the file stops growing at `GPU_LOG_CAP_BYTES` (64 MB,
  six days of 4 GPUs) and says so in `gpus.json`.
- `owners.csv`: every `OWNER_EVERY_S`, which process holds memory on which GPU:
  `seconds,index,pid,used MiB,owner` — a task of this run (`worker:0`), of another run, or
  `foreign:<user>`.
- `events.jsonl`: task starts, restarts and exits (status or signal), and the job's end.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

from tfctl.remote.agent.proc import proc_tags, proc_uid, user_name
from tfctl.remote.agent.run import now, read_json, task_file, write_json

GPU_LOG_CAP_BYTES = 64 << 20
OWNER_EVERY_S = 10.0
GPU_FIELDS = ("index", "utilization.gpu", "memory.used", "temperature.gpu", "power.draw",
              "clocks_event_reasons.active")


class GpuRecorder:
    """One `nvidia-smi -lms 1000` stream into `gpu.csv`, and the owners every few seconds."""

    def __init__(self, run_dir: str, run_id: str) -> None:
        import shutil  # here, not at the top: every agent start would pay for it

        self.run_dir, self.run_id = run_dir, run_id
        self.nvsmi = shutil.which("nvidia-smi")
        self.started = time.time()
        self.proc: Any = None
        self.next_owners = 0.0

    def start(self) -> bool:
        if self.nvsmi is None:
            return False
        import subprocess
        import threading

        gpus = self._query(["--query-gpu=index,uuid,name,memory.total"])
        write_json(os.path.join(self.run_dir, "gpus.json"), {
            "started_at": self.started, "fields": ["t_s", *GPU_FIELDS],
            "gpus": [{"index": row[0], "uuid": row[1], "name": row[2],
                      "memory_total_mib": compact(row[3])} for row in gpus if len(row) == 4]})
        self.proc = subprocess.Popen(
            [self.nvsmi, "--query-gpu=" + ",".join(GPU_FIELDS),
             "--format=csv,noheader,nounits", "-lms", "1000"],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        threading.Thread(target=self._pump, daemon=True).start()
        return True

    def _pump(self) -> None:
        path = os.path.join(self.run_dir, "gpu.csv")
        with open(path, "a") as out:
            for line in self.proc.stdout:
                fields = [compact(v) for v in line.strip().split(", ")]
                if len(fields) != len(GPU_FIELDS) or not fields[0].isdigit():
                    continue  # an XID message or an error line between rows
                out.write(f"{int(time.time() - self.started)},{','.join(fields)}\n")
                out.flush()
                if out.tell() > GPU_LOG_CAP_BYTES:
                    self._note("gpu.csv reached its cap; later samples were not kept")
                    break
        self.stop()

    def tick(self) -> None:
        """Record who holds each GPU, every OWNER_EVERY_S."""
        if self.nvsmi is None or time.time() < self.next_owners:
            return
        self.next_owners = time.time() + OWNER_EVERY_S
        index_of = {row[1]: row[0] for row in
                    self._query(["--query-gpu=index,uuid"]) if len(row) == 2}
        rows = self._query(["--query-compute-apps=gpu_uuid,pid,used_memory"])
        t = int(time.time() - self.started)
        with open(os.path.join(self.run_dir, "owners.csv"), "a") as out:
            for row in rows:
                if len(row) == 3 and row[1].isdigit():
                    owner = describe_owner(int(row[1]), self.run_id)
                    out.write(f"{t},{index_of.get(row[0], '')},{row[1]},{compact(row[2])},"
                              f"{owner}\n")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()

    def _query(self, args: list[str]) -> list[list[str]]:
        import subprocess

        try:
            done = subprocess.run([str(self.nvsmi), *args, "--format=csv,noheader,nounits"],
                                  capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            return []
        return [line.split(", ") for line in done.stdout.splitlines() if ", " in line]

    def _note(self, text: str) -> None:
        path = os.path.join(self.run_dir, "gpus.json")
        data = read_json(path) or {}
        data["note"] = text
        write_json(path, data)


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
    """Task starts, restarts and ends, seen in the supervisors' records, into events.jsonl."""

    def __init__(self, run_dir: str, names: list[str]) -> None:
        self.run_dir, self.names = run_dir, names
        self.seen: dict[str, tuple[Any, ...]] = {}

    def tick(self) -> None:
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
        with open(os.path.join(self.run_dir, "events.jsonl"), "a") as out:
            out.write(json.dumps(event) + "\n")


# Training speed in the usual log forms, first group the number: the bundled trainer's
# `steps_per_sec=41.2`, TF1 hooks' `global_step/sec: 41.2`, `2580.3 examples/sec`, and Keras'
# progress `… 12ms/step` (turned into steps/s).
DEFAULT_THROUGHPUT_PATTERNS = (
    r"steps_per_sec=([0-9.]+)",
    r"global_step/sec: ([0-9.]+)",
    r"([0-9.]+) examples/sec",
    r"\b([0-9.]+)ms/step\b",
)


class ThroughputTail:
    """Reads what each training task logged since the last look; writes `throughput.csv` lines
    `seconds since start,task,value,unit` for every line that matches a throughput pattern."""

    def __init__(self, run_dir: str, names: list[str], patterns: list[str],
                 started: float) -> None:
        import re

        self.run_dir, self.names, self.started = run_dir, names, started
        self.patterns = [re.compile(p) for p in (patterns or DEFAULT_THROUGHPUT_PATTERNS)]
        self.offsets = {name: 0 for name in names}

    def tick(self) -> None:
        rows = []
        t = int(time.time() - self.started)
        for name in self.names:
            path = task_file(self.run_dir, name, ".log")
            try:
                with open(path, "rb") as log:
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
            with open(os.path.join(self.run_dir, "throughput.csv"), "a") as out:
                out.writelines(rows)

    def value(self, line: str) -> tuple[float, str] | None:
        for pattern in self.patterns:
            match = pattern.search(line)
            if match:
                try:
                    number = float(match.group(1))
                except (IndexError, ValueError):
                    continue
                if "ms/step" in pattern.pattern:
                    return (1000.0 / number if number else 0.0), "steps/s"
                unit = "examples/s" if "examples" in pattern.pattern else "steps/s"
                return number, unit
        return None
