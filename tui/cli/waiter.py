"""The waiter of a job queued with `tfctl up --when-free`: `python -m tfctl.tui.cli.waiter RECORD`.

Started by `queue.start_waiter` in a session of its own, its output in the job's log. Every
`poll_s` seconds it looks at the hosts the job needs (one `gpu_state` request each, which also
refreshes its tickets there, remote/lab/queue.py); when the job is first in line on every one
of them and its GPUs are free, it runs the normal `tfctl up` with the options it was queued
with. Then its tickets go: the run's claims hold the GPUs from there on. An `up` refused because
someone took a GPU in between (a busy GPU, too few free ones) goes back to waiting in its place;
any other failure ends the wait, said in the record and the log. SIGTERM (`tfctl queue cancel`)
ends it too, its tickets removed; SIGHUP is ignored: no terminal is its own.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from typing import Any

from tfctl.tui.cli.queue import record_fleet, start_waiting, update_record, wants_from
from tfctl.tui.cli.queue import waiter_log as log

RETRY_WORDS = ("GPUs the plan assigns are in use or reserved", "`gpus: free` wants")
"""An `up` that failed with these lost a race for its GPUs: the job waits again."""


def run_up(record: dict[str, Any], stop: threading.Event) -> tuple[int, str | None, str]:
    """The normal `tfctl up`, as queued: (exit status, run id or None, its error lines)."""
    argv = [sys.executable, "-m", "tfctl.tui", "-i", record["inventory"]]
    if record.get("hostfile"):
        argv += ["--hostfile", record["hostfile"]]
    argv += ["up", "--json", *record.get("up_args", [])]
    log("its turn: " + " ".join(argv[2:]))
    child = subprocess.Popen(argv, cwd=record["cwd"], stdin=subprocess.DEVNULL,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    while True:
        try:
            out, err = child.communicate(timeout=0.5)
            break
        except subprocess.TimeoutExpired:
            if stop.is_set():  # cancelled mid-up: `up` stops what it started
                child.send_signal(signal.SIGTERM)
    sys.stdout.write(err)
    run_id = None
    if child.returncode == 0:
        try:
            run_id = json.loads(out).get("run_id")
        except ValueError:
            run_id = None
    return child.returncode, run_id, err


def wait(path: str) -> int:
    from tfctl.remote.lab.queue import drop, look, put

    start = start_waiting(path, "queue")
    if start is None:
        return 2
    ticket_id, record, stop, deadline, poll_s = start
    wants = wants_from(record)
    log(f"waiting for {', '.join(f'{h}: {w.words()}' for h, w in wants.items())}")
    state, why, run_id = "cancelled", "cancelled", None
    said = None
    while not stop.is_set():
        if time.time() > deadline:
            state, why = "timed_out", f"still waiting after {record['timeout_s']:g} s: {said}"
            break
        try:
            with record_fleet(record) as fleet:
                found = look(fleet, ticket_id, wants)
                lost = [h for h, t in found.turns.items() if t.why == "its ticket is not there"]
                if lost:  # the host lost it (its /tmp was emptied): queue again, at the back
                    log(f"ticket gone from {', '.join(lost)}: queued there again")
                    put(fleet, ticket_id, record["job"], {h: wants[h] for h in lost},
                        record.get("client"))
            why = found.why()
        except Exception as exc:  # an inventory edited meanwhile, a host down: look again
            found, why = None, f"cannot look: {exc}"
        if found is not None and found.ready:
            code, run_id, err = run_up(record, stop)
            if code == 0:
                state, why = "started", f"run {run_id} started"
                break
            if stop.is_set():
                break
            if not any(w in err for w in RETRY_WORDS):
                state, why = "failed", (err.strip().splitlines() or [f"up exited {code}"])[-1]
                break
            why = "lost its GPUs to another job just now: waiting again"
        if why != said:
            log(why)
            said = why
            update_record(ticket_id, why=why)
        stop.wait(poll_s)
    log(f"{state}: {why}")
    try:
        with record_fleet(record) as fleet:
            drop(fleet, ticket_id, list(wants))
    except Exception as exc:  # stale within minutes anyway, holding nobody back
        log(f"could not remove its tickets: {exc}")
    update_record(ticket_id, state=state, why=why, run_id=run_id, ended_at=time.time())
    return 0 if state == "started" else 1


if __name__ == "__main__":
    sys.exit(wait(sys.argv[1]))
