#!/usr/bin/env python3
"""Where held `tfctl up` spends its time, per host: a trace, not a guess.

    python benchmarks/up_trace.py                   # 16 hosts, 48 light tasks, 3 reps, held
    python benchmarks/up_trace.py --hosts 4 --reps 1
    python benchmarks/up_trace.py --cold            # `--persist 0`: an agent started per host

Turns on the agent's opt-in trace (remote/agent/trace.py: the file `<workdir>/.tfctl/trace.jsonl`
on each lab host, made before the first command so that every agent session sees it) and runs
the light job (tests/support/lightjob.py, ps:0 + 2 CPU workers per host) through a wrapper that
notes, per task, when its process was exec'd (/proc/self/stat's start time), when its Python
began running the wrapper, and when it called listen() on its port. Every clock is this
machine's (the lab hosts are network namespaces of it), so the client's, the agents' and the
tasks' times line up. Per repetition: `tfctl up` (a no-change sync first, as a user runs it),
timed from here, its `starting` line timestamped as it is written; then, untimed, `down`.

Prints, per phase, the median over hosts and repetitions (and the worst host's median), in the
order they happen on a host:
  client → check arrives     the CLI's start, inventory, the holder's sessions, the sync diff
                             sent; until the agent reads `up_check`
  check on the host          `up_check` (sync diff, setup cache, nvidia-smi, ports)
  check reply → go arrives   the client judging every host's check, `starting`, the manifest
  prepare                    `up_go` until the run directory and manifest are written
  launch                     the run's keeper forked (one per host; before it, a supervisor
                             per task) and each task started, until every pid is recorded;
                             split per task into
    fork → keeper runs       prepare → the process its pid record names as its supervisor
                             (the keeper) created (/proc start time, in the record)
    keeper → task process    the keeper's creation → the task's process created
    task process → Python runs  the task's process → its interpreter's first line (exec,
                             the interpreter's start: the wrapper's first line)
    Python → listen          the task's own start until listen() (imports, parse, bind)
  claim (+ watcher)          the claim written (before the keeper: the watcher started too)
  wait: tasks still starting `waiting` → the last task of the host called listen()
  wait: after the last listen the last listen() → the wait's verdict (its cheap probes and the
                             full look that settles it; `looks`: full looks per host, and
                             when the first came and how many tasks it settled)
  status                     the host's status read for the answer
  reply → up returns         the last host's answer → `tfctl up` exits (the client's status
                             table, the watchers' mark, its exit)
and the whole: `up` from start to exit, split at its `starting` line; the client's part after
the last answer split at its first line on stdout (the status table) and its `run ... is up`
line (its output unbuffered for this); and `tfctl --help` timed after each repetition (the
CLI's start, a floor of the first phase).
/proc start times are in clock ticks (10 ms); everything else is time.time().
Needs root (network-namespace lab hosts).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections import defaultdict
from pathlib import Path

from _common import (
    PYTHON,
    arguments,
    gone,
    light_inventory,
    light_job_dir,
    machine_line,
    median,
    on_a_testbed,
    run_id_of,
    stop_holders,
    tfctl_argv,
    timed,
    tree_envs,
    wait_until,
)

from tests.support.testbed import Testbed

TRACE_NAME = ".tfctl/trace.jsonl"  # remote/agent/trace.py's TRACE_NAME
TASK_TRACE = ".tfctl/tasktrace.jsonl"  # where TRACED_JOB writes
# The light job behind a wrapper noting its process's creation (/proc start time: the fork that
# exec'd it), its interpreter's first line and its listen()
# (one line, appended, in its working directory: the host's workdir).
TRACED_JOB = """import time
_py = time.time()
import os, runpy, socket, sys
with open("/proc/self/stat") as _f:
    _ticks = int(_f.read().rsplit(")", 1)[1].split()[19])
_exec = time.time() - (time.clock_gettime(time.CLOCK_BOOTTIME) - _ticks / os.sysconf("SC_CLK_TCK"))
_listen = socket.socket.listen
def listen(self, *args):
    _listen(self, *args)
    line = '{"pid": %d, "exec": %r, "py": %r, "listen": %r}\\n' % (os.getpid(), _exec, _py,
                                                                  time.time())
    fd = os.open(".tfctl/tasktrace.jsonl", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    os.write(fd, line.encode())
    os.close(fd)
socket.socket.listen = listen
sys.argv[0] = "job.py"
runpy.run_path("job.py", run_name="__main__")
"""

PHASES = ("client → check arrives", "check on the host", "check reply → go arrives", "prepare",
          "launch", "  fork → keeper runs", "  keeper → task process",
          "  task process → Python runs", "  Python → listen", "claim (+ watcher)",
          "wait: tasks still starting", "wait: after the last listen", "status",
          "reply → up returns")

LOOKS = ("looks", "first look after the last listen", "first look: tasks settled")
"""The wait's full looks per host; when the first came, after the host's last listen() (ms; < 0:
before it); how many of the host's tasks it settled."""

HZ = os.sysconf("SC_CLK_TCK")


def boot_epoch() -> float:
    """time.time() at boot (CLOCK_BOOTTIME's zero): what /proc start times count from."""
    return time.time() - time.clock_gettime(time.CLOCK_BOOTTIME)


def read_lines(path: Path) -> list[dict[str, object]]:
    try:
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    except OSError:
        return []


def traced_up(inv: Path, env: dict[str, str]) -> tuple[float, float, dict[str, float], str]:
    """`tfctl up` (its output unbuffered, so that each line is timed as it is written): its
    start, its end, when it wrote `starting`, its first line on stdout (the status table) and
    its `run ... is up` line, and its stdout."""
    started = time.time()
    proc = subprocess.Popen(tfctl_argv(inv, "up"), env=dict(env, PYTHONUNBUFFERED="1"),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    said: dict[str, float] = {}
    errors: list[str] = []

    def watch_stderr() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            errors.append(line)
            if "starting " in line and "starting" not in said:
                said["starting"] = time.time()

    reader = threading.Thread(target=watch_stderr, daemon=True)
    reader.start()
    lines = []
    for line in proc.stdout or ():
        said.setdefault("table", time.time())
        if line.startswith("run ") and " is up" in line:
            said["is up"] = time.time()
        lines.append(line)
    code = proc.wait()
    ended = time.time()
    reader.join()
    out = "".join(lines)
    if code != 0:
        raise SystemExit(f"up failed (exit {code}):\n{out[-3000:]}\n{''.join(errors)[-3000:]}")
    return started, ended, said, out


def host_phases(testbed: Testbed, host: str, run_id: str, started: float, ended: float,
                boot: float) -> dict[str, float]:
    """One host's phases of one `up` (seconds), from its agent's trace and its tasks' notes."""
    workdir = testbed.host(host).workdir
    events = [e for e in read_lines(workdir / TRACE_NAME)
              if float(e["t"]) >= started]  # type: ignore[arg-type]
    first: dict[str, float] = {}
    last: dict[str, float] = {}
    looks = 0
    for e in events:
        ev, t = str(e["ev"]), float(e["t"])  # type: ignore[arg-type]
        first.setdefault(ev, t)
        last[ev] = t
        looks += ev == "look"
    tasks = read_lines(workdir / TASK_TRACE)
    listens = [float(t["listen"]) for t in tasks]  # type: ignore[arg-type]
    run_dir = workdir / ".tfctl" / "runs" / run_id
    supervisors = {}
    for record in run_dir.glob("*.pid.json"):
        data = json.loads(record.read_text())
        if "supervisor_start_ticks" in data and "pid" in data:  # a task's (not the watcher's)
            supervisors[int(data["pid"])] = boot + int(data["supervisor_start_ticks"]) / HZ
    p: dict[str, float] = {
        "client → check arrives": first["up_check"] - started,
        "check on the host": last["up_check.reply"] - first["up_check"],
        "check reply → go arrives": first["up_go"] - last["up_check.reply"],
        "prepare": first["prepared"] - first["up_go"],
        "launch": first["launched"] - first["prepared"],
        "claim (+ watcher)": first["waiting"] - first["launched"],
        "wait: tasks still starting": max(0.0, max(listens) - first["waiting"]),
        "wait: after the last listen": last["waited"] - max(first["waiting"], max(listens)),
        "status": last["up_go.reply"] - last["waited"],
        "looks": float(looks),
    }
    seen = [e for e in events if e["ev"] == "look"]
    if seen:  # the first full look: when, after the last listen(), and how much it settled
        p["first look after the last listen"] = float(seen[0]["t"]) - max(listens)  # type: ignore
        p["first look: tasks settled"] = float(seen[0]["settled"])  # type: ignore[arg-type]
    per_task: dict[str, list[float]] = defaultdict(list)
    for t in tasks:
        sup = supervisors.get(int(t["pid"]))  # type: ignore[call-overload]
        exec_at, py, listen = (float(t[k]) for k in ("exec", "py", "listen"))  # type: ignore
        if sup is not None:
            per_task["  fork → keeper runs"].append(sup - first["prepared"])
            per_task["  keeper → task process"].append(exec_at - sup)
        per_task["  task process → Python runs"].append(py - exec_at)
        per_task["  Python → listen"].append(listen - py)
    p.update({k: median(v) for k, v in per_task.items()})
    p["_reply"] = last["up_go.reply"]
    return p


def main() -> int:
    parser = arguments(__doc__, reps=3, hosts=16)
    parser.add_argument("--cold", action="store_true", help="`--persist 0`: nothing held")
    args = parser.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("needs root: the network-namespace testbed")
    print(machine_line())
    boot = boot_epoch()
    with on_a_testbed(args.hosts, "tfctl-trace-") as (tmp, testbed, runtime):
        job = light_job_dir(tmp)
        (job / "traced.py").write_text(TRACED_JOB)
        inv = light_inventory(testbed, job / "cluster.yaml", script="traced.py")
        env = tree_envs(runtime, None)[""]
        if args.cold:
            env = dict(env, TFCTL_PERSIST="0")
        timed(tfctl_argv(inv, "sync"), env=dict(env, TFCTL_PERSIST="0")).check("sync")
        for name in testbed.names:  # before any agent session: each looks once
            trace = testbed.host(name).workdir / TRACE_NAME
            trace.parent.mkdir(parents=True, exist_ok=True)
            trace.write_text("")
        print(f"lab: {len(testbed.hosts)} hosts × 3 light tasks; tfctl up "
              f"{'--persist 0' if args.cold else 'held'}; python {PYTHON}")
        rows: dict[str, list[float]] = defaultdict(list)
        worst: dict[str, list[float]] = defaultdict(list)
        whole: dict[str, list[float]] = defaultdict(list)
        for rep in range(-1, args.reps):  # rep -1: the warm-up (the holder), not counted
            for name in testbed.names:
                (testbed.host(name).workdir / TASK_TRACE).write_text("")
            started, ended, said, out = traced_up(inv, env)
            run_id = run_id_of(out)
            hosts = {h: host_phases(testbed, h, run_id, started, ended, boot)
                     for h in testbed.names}
            timed(tfctl_argv(inv, "down", "--grace", "2"), env=env).check("down")
            wait_until(lambda run_id=run_id: gone(run_id), 10)
            if rep < 0:
                continue
            last_reply = max(p.pop("_reply") for p in hosts.values())
            for key in [*PHASES, *LOOKS]:
                values = [p[key] for p in hosts.values() if key in p]
                if key == "reply → up returns":
                    values = [ended - last_reply]
                rows[key] += values
                if values:  # none: the pid records name no supervisor
                    worst[key].append(max(values))
            whole["up, whole"].append(ended - started)
            if "starting" in said:
                whole["up start → `starting`"].append(said["starting"] - started)
                whole["`starting` → up returns"].append(ended - said["starting"])
            if "table" in said and "is up" in said:
                whole["  last answer → status table"].append(said["table"] - last_reply)
                whole["  status table → `is up` line"].append(said["is up"] - said["table"])
                whole["  `is up` line → up exits"].append(ended - said["is up"])
            whole["tfctl --help (the CLI's start)"].append(
                timed(tfctl_argv(inv, "--help"), env=env).check("help").wall_s)
            print(f"  rep {rep + 1}: up {ended - started:.2f} s", flush=True)
        print(f"medians over {args.hosts} hosts × {args.reps} repetitions (worst host: the "
              "median over repetitions of the slowest host's value), ms:")
        print(f"{'phase':34}{'median':>9}{'worst host':>12}")
        for key in [*PHASES, *LOOKS]:
            scale = 1 if key in LOOKS[::2] else 1000
            if not rows[key]:
                print(f"{key:34}{'–':>9}{'–':>12}")
                continue
            print(f"{key:34}{median(rows[key]) * scale:9.1f}{median(worst[key]) * scale:12.1f}")
        for key, values in whole.items():
            print(f"{key:34}{median(values) * 1000:9.1f}")
        stop_holders(runtime + "/this")
    return 0


if __name__ == "__main__":
    sys.exit(main())
