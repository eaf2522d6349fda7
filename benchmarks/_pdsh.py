"""The pdsh contender of lab_scale.py: the light job's processes launched by `pdsh -R ssh`
(and by the same over OpenSSH's kept connections), timed until every one listens."""

from __future__ import annotations

import os
import secrets
import shlex
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from _common import Timed, kill_tagged, machine_busy_s, ssh_options, timed, wait_until

from tests.support.testbed import Testbed


def pdsh_envs(testbed: Testbed, runtime: str) -> tuple[dict[str, str], dict[str, str]]:
    """pdsh's environment with the lab's key and strict host-key checking, and the same over
    OpenSSH's kept connections (ControlMaster, ControlPersist), warmed by an untimed first call:
    against `tfctl up` borrowing its holder's sessions, both sides without handshakes."""
    plain = dict(os.environ, PDSH_RCMD_TYPE="ssh", PDSH_SSH_ARGS_APPEND=shlex.join(
        ssh_options(testbed.key, testbed.known_hosts, testbed.user)[2:]))  # -l is pdsh's own option
    muxed = dict(plain, PDSH_SSH_ARGS_APPEND=plain["PDSH_SSH_ARGS_APPEND"] + " " + shlex.join(
        ["-o", "ControlMaster=auto", "-o", "ControlPersist=120",
         "-o", f"ControlPath={runtime}/cm-%C"]))
    timed(["pdsh", "-f", "32", "-R", "ssh", "-l", testbed.user, "-w", ",".join(
        h.address for h in testbed.hosts), "true"], env=muxed).check("pdsh warm-up")
    return plain, muxed


def pdsh_command(python: str, tag: str, tasks: Sequence[str], ports: Mapping[str, int]) -> str:
    """One detached launch of the light job's 3 processes (flags style, same ports)."""
    ps = f"x:{ports['ps']}"
    workers = f"x:{ports['worker']},x:{ports['worker'] + 1}"
    starts = []
    for task in tasks:
        kind, index = task.split(":")
        argv = [python, "job.py", "--forever", f"--job_name={kind}", f"--task_index={index}",
                f"--ps_hosts={ps}", f"--worker_hosts={workers}"]
        starts.append(f"BENCH_TAG={tag} setsid {shlex.join(argv)} </dev/null >/dev/null 2>&1 &")
    return 'cd "$HOME/../work" || exit 1; ' + " ".join(starts)


def listening_ports(pid: int) -> set[int]:
    """TCP ports listening in the network namespace of `pid` (a lab host's sshd)."""
    ports = set()
    for line in Path(f"/proc/{pid}/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        if fields[3] == "0A":
            ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


def all_listening(testbed: Testbed, ports: Mapping[str, int]) -> bool:
    wanted = {ports["ps"], ports["worker"], ports["worker"] + 1}
    return all(wanted <= listening_ports(testbed.sshd_pid(h) or 0) for h in testbed.names)


def pdsh_once(testbed: Testbed, env: dict[str, str], hosts: str, tasks: Sequence[str],
              ports: Mapping[str, int]) -> tuple[Timed, float, float]:
    """pdsh's own time, the time until every process it started listens on its port (what
    `tfctl up` waits for), and the machine's CPU until then; then every process is killed."""
    tag = secrets.token_hex(4)
    argv = ["pdsh", "-f", "32", "-R", "ssh", "-l", testbed.user, "-w", hosts,
            pdsh_command(testbed.python, tag, tasks, ports)]
    busy = machine_busy_s()
    started = time.monotonic()
    result = timed(argv, env=env).check("pdsh")
    wait_until(lambda: all_listening(testbed, ports), 30, step_s=0.005)
    listening = time.monotonic() - started
    machine = machine_busy_s() - busy  # less this process's own polling (machine_busy_s)
    kill_tagged("BENCH_TAG", tag)
    wait_until(lambda: not any(listening_ports(testbed.sshd_pid(h) or 0) & {ports["ps"]}
                               for h in testbed.names), 10)
    return result, listening, machine
