"""The pdsh peers of the benchmarks: what tfctl does on every host, done by `pdsh -R ssh` over
fresh connections or over OpenSSH's kept ones (ControlMaster, ControlPersist): the light job's
processes launched (lab_scale.py: launched, then polled from here until they listen;
fig_up_*.py: started and waited for on the host, in the same remote shell, as tfctl's agent
does), and the queries `tfctl lab` makes (fig_lab_*.py, lab_view.py)."""

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


def start_and_wait_command(python: str, tag: str, tasks: Sequence[str],
                           ports: Mapping[str, int], timeout_s: float = 30) -> str:
    """What tfctl's agent does for `up` on one host, by hand in one remote shell: the light
    job's processes started detached (setsid, nohup, each writing a log of its own in the
    workdir), then a poll of the listening sockets (`ss -Hltn`) every 20 ms until each task's
    port listens; exit 1 if one does not within `timeout_s`."""
    wanted = [ports["ps"], ports["worker"], ports["worker"] + 1]
    starts = []
    for task in tasks:
        kind, index = task.split(":")
        argv = [python, "job.py", "--forever", f"--job_name={kind}", f"--task_index={index}",
                f"--ps_hosts=x:{wanted[0]}", f"--worker_hosts=x:{wanted[1]},x:{wanted[2]}"]
        log = f"bench-{kind}-{index}.log"
        starts.append(f"BENCH_TAG={tag} setsid nohup {shlex.join(argv)} </dev/null "
                      f">{log} 2>&1 &")
    checks = " ".join(f'case "$l" in *":{port} "*) ;; *) ok=0;; esac;' for port in wanted)
    tries = int(timeout_s / 0.02)
    wait = (f"n=0; while :; do l=$(ss -Hltn); ok=1; {checks} [ $ok = 1 ] && exit 0; "
            f"n=$((n+1)); [ $n -gt {tries} ] && exit 1; sleep 0.02; done")
    return 'cd "$HOME/../work" || exit 1; ' + " ".join(starts) + " " + wait


def pdsh_argv(testbed: Testbed, command: str, fanout: int = 32) -> list[str]:
    """`pdsh -f fanout -R ssh` running `command` on every lab host as the lab's user."""
    return ["pdsh", "-f", str(fanout), "-R", "ssh", "-l", testbed.user, "-w",
            ",".join(h.address for h in testbed.hosts), command]


def stop_peer(testbed: Testbed, tag: str, ports: Mapping[str, int]) -> None:
    """Every process a peer started under `tag` killed, and its ports free again."""
    kill_tagged("BENCH_TAG", tag)
    wait_until(lambda: not any(listening_ports(testbed.sshd_pid(h) or 0) & {ports["ps"]}
                               for h in testbed.names), 10)


def by_hand(argv: list[str], env: dict[str, str], hosts: int, gpus: int) -> Timed:
    """pdsh's run, checked to have brought every host's GPU rows."""
    t = timed(argv, env=env).check("pdsh")
    rows = [line for line in t.stdout.splitlines() if ", GPU-" in line and "%" not in line]
    if len(rows) < hosts * gpus:
        raise SystemExit(f"pdsh brought {len(rows)} GPU rows, not {hosts * gpus}:\n"
                         f"{t.stdout[-3000:]}\n{t.stderr[-3000:]}")
    return t
