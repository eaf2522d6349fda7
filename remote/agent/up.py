"""`tfctl up` on one host in two requests: every check in one, the start in the other.

Part of the agent program (`__init__.py`): stdlib only, Python >= 3.8, Linux, no tfctl imports.
Its operations are in the table of `optable.py`.

`up_check` answers everything `up` must know before it may start anything anywhere: whether
the synced tree differs (the client sends the digests), whether `job.setup` is cached, what
nvidia-smi says of the GPUs (the busy-GPU check) and which task ports are taken (a live run's
tasks hold theirs), and for the tasks whose port the inventory does not write, which free
ports they would take (`freeports.py`, leased for this `up`). It starts nothing, and it
cannot: only the client, once every host's answer is in and judged, sends `up_go`. That is why
one host never starts tasks while another host's check is still to fail (a busy GPU, a taken
port refuse the whole `up` with nothing started).
`prepare`, in `up_go`, refuses a run while another is live here all the same (the check's
answer may be a moment old), and `up_go` refuses to start when a port chosen by the check was
taken since (`verify_ports`).

`up_go` is the operations `prepare`, `launch`, `wait_ports` and `status` in one request, so
that starting a host costs one line each way: make the run directory (and copy the cached setup
log into it), start the tasks named, wait for them to listen or die (the cheap wait of
`wait.py`) for at most one round, and with the host's tasks all up, answer with the host's
status. A round stays short (the client asks for about 2 s) so that
Ctrl-C in the client is acted on within a round, not after the whole wait for ports.
"""

from __future__ import annotations

import os
import time
from typing import Any

from tfctl.remote.agent.claims import claim_run, read_claims
from tfctl.remote.agent.freeports import release, taken_since
from tfctl.remote.agent.hostops import choose_from, port_states
from tfctl.remote.agent.jsonfile import now, write_json
from tfctl.remote.agent.keeper import keep_tasks
from tfctl.remote.agent.netroute import hostname_addresses
from tfctl.remote.agent.policy import read_policy
from tfctl.remote.agent.proc import user_name
from tfctl.remote.agent.rundir import expand, load_manifest, manifest_tasks, run_dir_of
from tfctl.remote.agent.runops import op_prepare, op_status, start_states
from tfctl.remote.agent.sync import sync_diff
from tfctl.remote.agent.tickets import others_waiting
from tfctl.remote.agent.trace import mark
from tfctl.remote.agent.vocab import (
    ClaimsAnswer,
    HostUser,
    LaunchAnswer,
    PrepareRequest,
    RunRef,
    StatusRequest,
    SyncDiff,
    UpCheck,
    UpCheckRequest,
    UpGo,
    UpGoRequest,
    UpMark,
)
from tfctl.remote.agent.wait import wait_until_up
from tfctl.remote.agent.watch import UP_MARK
from tfctl.remote.agent.wire import AgentError

SETUP_FOLDER = ".tfctl/setup"


def op_up_check(req: UpCheckRequest) -> UpCheck:
    workdir = expand(str(req.workdir))
    mark(workdir, "up_check")
    sync = setup = gpus = claims = None
    if req.entries is not None:  # also creates the workdir
        sync = SyncDiff.from_wire(sync_diff(workdir, req.entries))
    if req.setup is not None:
        setup = setup_cached(workdir, str(req.setup["digest"]), list(req.setup["inputs"]))
    if req.gpus_script:
        gpus = gpus_listing(req.gpus_script)
        found, warnings = read_claims()  # other users' runs and reservations (claims.py)
        claims = ClaimsAnswer(HostUser(os.getuid(), user_name(os.getuid())), tuple(found),
                              tuple(warnings))
    limits = waiting = None
    if req.gpus_script:
        limits, waiting = _limits_here()
    name, addresses = hostname_addresses() if req.ask_hostname else (None, [])
    # ports chosen at up are bind-probed and leased (freeports.py)
    mark(workdir, "up_check.reply")
    return UpCheck(sync, setup, None if gpus is None else str(gpus["stdout"] or ""),
                   port_states(req.ports), claims,
                   choose_from(req.choose) if req.choose else None,
                   None if gpus is None else gpus["error"], name, tuple(addresses),
                   limits, waiting)


def _limits_here() -> tuple[dict[str, Any] | None, str | None]:
    """The lab policy's limits on this host, and another user's waiting job in its queue."""
    limits = (read_policy().get("policy") or {}).get("limits")
    if not limits:
        return None, None
    return limits, others_waiting(os.getuid())


def setup_cached(workdir: str, digest: str, inputs: list[str]) -> dict[str, Any]:
    """Whether `remote/agent/setup.sh` would skip: its hash of the commands and the inputs as
    they are here, computed as it computes it, and its `done-<hash>` marker. A hash computed
    differently (an odd input, no sha256sum there) only finds no marker: then the client runs
    the setup program itself, which decides by its own hash."""
    import hashlib

    h = hashlib.sha256((digest + "\n").encode())
    for given in inputs:
        path = os.path.join(workdir, given)
        if os.path.isdir(path):
            found = []
            for top, _dirs, files in os.walk(path):
                for name in files:
                    full = os.path.join(top, name)
                    if os.path.isfile(full) and not os.path.islink(full):
                        found.append(os.path.relpath(full, workdir))
            for rel in sorted(found, key=lambda p: p.encode("utf-8", "surrogateescape")):
                _hash_file(h, workdir, rel)
        elif os.path.isfile(path):
            _hash_file(h, workdir, given)
        else:
            h.update(f"missing {given}\n".encode("utf-8", "surrogateescape"))
    key = h.hexdigest()[:16]
    folder = os.path.join(workdir, SETUP_FOLDER)
    try:
        with open(os.path.join(folder, "done-" + key)) as done:
            done_at = done.read().strip()
    except OSError:
        return {"cached": False, "hash": key}
    return {"cached": True, "hash": key, "log": os.path.join(folder, key + ".log"),
            "done_at": int(done_at) if done_at.isdigit() else None}


def _hash_file(h: Any, workdir: str, rel: str) -> None:
    full = os.path.join(workdir, rel)
    h.update(f"file {rel} {int(os.lstat(full).st_mtime)}\n".encode("utf-8", "surrogateescape"))
    with open(full, "rb") as data:
        for chunk in iter(lambda: data.read(1 << 20), b""):
            h.update(chunk)


def gpus_listing(script: str) -> dict[str, Any]:
    """The busy-GPU check's shell program (`gpus_busy.sh`, filled in by the client): its output."""
    import subprocess

    try:
        done = subprocess.run(["sh", "-c", script], stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return {"stdout": "", "error": f"nvidia-smi did not answer: {exc}"}
    return {"stdout": done.stdout.decode(errors="replace"), "error": None}


def op_up_go(req: UpGoRequest) -> UpGo:
    workdir, run_id = expand(str(req.workdir)), str(req.run_id)
    run_dir = run_dir_of(workdir, run_id)
    mark(workdir, "up_go", run=run_id)
    if req.manifest is not None:
        op_prepare(PrepareRequest(workdir, run_id, req.manifest))
        if req.setup_log:
            _copy_setup_log(req.setup_log, os.path.join(run_dir, "setup.log"))
    manifest = load_manifest(run_dir)
    taken = taken_since(req.verify_ports)
    if taken:  # another process took a chosen port since the check: nothing starts here
        raise AgentError("port_taken", f"port {', '.join(map(str, taken))} was taken on this "
                         "host after `up` chose it (another run starting?)", ports=taken)
    started = LaunchAnswer()
    mark(workdir, "prepared", run=run_id)
    if req.launch:
        kept = keep_tasks(run_dir, workdir, run_id, manifest, list(req.launch))
        mark(workdir, "launched", run=run_id, tasks=len(req.launch))
        started = LaunchAnswer.from_wire(dict(kept, claim_warning=claim_run(
            run_dir, run_id, manifest, kept["keeper_pid"])))
    ready, seen, waited = True, None, {}
    mark(workdir, "waiting", run=run_id)
    if req.wait:
        look = wait_until_up(run_dir, run_id, manifest, manifest_tasks(manifest, list(req.wait)),
                             req.timeout_s)
        waited, ready, seen = start_states(look["tasks"]), bool(look["ready"]), look["seen"]
        if req.lease_token and all(t["state"] != "timeout" for t in look["tasks"].values()):
            release(req.lease_token)  # each task holds its port now, or has ended already
    mark(workdir, "waited", run=run_id)
    status = None
    if req.status is not None and ready:  # the wait's last look, if it saw every task
        status = op_status(StatusRequest(workdir, run_id, int(req.status)), seen)
    mark(workdir, "up_go.reply", run=run_id)
    return UpGo(waited, status, started.tasks if req.launch else None, started.keeper_pid,
                started.claim_warning, time.time())


def _copy_setup_log(source: str, target: str) -> None:
    """The host's setup log (of the setup this `up` ran, or of the cached one it skipped) in the
    run directory beside the tasks' logs, as `setup.log`: the run keeps the setup it ran with."""
    import contextlib
    import shutil

    with contextlib.suppress(OSError):  # a convenience: the run goes on without its copy
        shutil.copyfile(source, target)


def op_up_mark(req: RunRef) -> UpMark:
    """`up` verified every task of the run on every host: the watcher may trust it."""
    run_dir = run_dir_of(expand(str(req.workdir)), str(req.run_id))
    load_manifest(run_dir)
    mark = UpMark(now())
    write_json(os.path.join(run_dir, UP_MARK), mark.to_wire())
    return mark
