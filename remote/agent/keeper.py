"""The run's keeper on a host: one process that starts, relays, restarts and records every task
of the run there, and applies the job's end (watch.py), with no client connected.

Part of the agent program (`__init__.py`): stdlib only, Python >= 3.8, Linux, no tfctl imports.

A run's processes on a host are its tasks and one keeper (`tfctl-keeper` in `ps`), the shape of
torchrun's agent: one per node for all of its local workers. The keeper is detached from the
agent's SSH session (detach.py), so SSH returns at once and the tasks outlive the connection.
Each task is a thread of it (supervisor.py); its main thread watches the job's end (watch.py).

Starting tasks (`keep_tasks`): the agent leaves a request beside each task's records
(`<task>.launch`) and either starts the keeper, which takes the requests, or, where the run's
keeper runs, wakes it (SIGUSR1). The keeper holds `keeper.lock` (flock) for as long as it
lives: whoever takes that lock knows no keeper runs, so two agents never start two keepers for
one run, and a request left while a keeper was exiting is taken by the next one (the agent's
wait starts it). The keeper ends once the job's end is applied (or the run stopped) and none
of its tasks runs.

SIGTERM (what `tfctl down` sends once the run's tasks are stopped, state.end_keeper) ends the
keeper only when none of its tasks runs: a stray TERM does not leave tasks unkept. SIGINT and
SIGHUP are shrugged off. A keeper killed outright (SIGKILL, the OOM killer) leaves its tasks
running; the next `status` or `restart` of the run starts a keeper that takes them back
(`take_back_orphans`) and says so.
"""

from __future__ import annotations

import contextlib
import os
import time
from typing import Any

from tfctl.remote.agent.boot import boot_record, from_other_boot
from tfctl.remote.agent.detach import fork_detached
from tfctl.remote.agent.jsonfile import read_json, write_json
from tfctl.remote.agent.proc import send_signal, start_ticks
from tfctl.remote.agent.rundir import load_manifest, manifest_tasks, task_file
from tfctl.remote.agent.state import KEEPER_PID, recorded_alive, supervisor_alive
from tfctl.remote.agent.supervisor import TaskSupervision
from tfctl.remote.agent.watch import StopWatching, watch_job
from tfctl.remote.agent.wire import AgentError

KEEPER_LOCK = "keeper.lock"
LAUNCH_REQUEST = ".launch"
TAKE_BACK_WAIT_S = 2.0
FIRST_START_S = 5.0
KEEPER_POLL_S = 1.0
"""How often the keeper looks for requests without being woken (a wake-up signal is lost
only to a keeper between its last look and its exit, whose successor takes the request)."""


def keep_tasks(run_dir: str, workdir: str, run_id: str, manifest: dict[str, Any],
               names: list[str] | None, timeout_s: float = 15.0) -> dict[str, Any]:
    """Start each task named (every task of the run when None) under the run's keeper; return
    once every one has recorded its pid (or failed to start), with the keeper's pid."""
    tasks = manifest_tasks(manifest, names)
    for task in tasks:
        record = read_json(task_file(run_dir, task["name"], ".pid.json"))
        if record and not os.path.exists(task_file(run_dir, task["name"], ".exit.json")) and \
                (recorded_alive(record) or supervisor_alive(record)):
            raise AgentError("task_running", f"task {task['name']} of run {run_id} is already "
                             "running on this host", task=task["name"])
    for task in tasks:
        for suffix in (".pid.json", ".exit.json", ".stopped"):
            path = task_file(run_dir, task["name"], suffix)
            if os.path.exists(path):
                os.remove(path)
        with open(task_file(run_dir, task["name"], LAUNCH_REQUEST), "w"):
            pass
    keeper = ensure_keeper(run_dir, run_id, workdir)
    started: dict[str, Any] = {}
    deadline, next_look = time.time() + timeout_s, time.time() + 0.5
    while len(started) < len(tasks):
        for task in tasks:
            pid_rec = read_json(task_file(run_dir, task["name"], ".pid.json"))
            exit_rec = read_json(task_file(run_dir, task["name"], ".exit.json"))
            if pid_rec or exit_rec:
                started[task["name"]] = {
                    "pid": (pid_rec or {}).get("pid"), "pgid": (pid_rec or {}).get("pgid"),
                    "started_at": (pid_rec or {}).get("started_at"),
                    "error": (exit_rec or {}).get("error")}
        if len(started) < len(tasks):
            if time.time() > deadline:
                missing = [t["name"] for t in tasks if t["name"] not in started]
                raise AgentError("launch_timeout", f"tasks {', '.join(missing)} did not start "
                                 f"within {timeout_s:.0f} s", tasks=started)
            if time.time() > next_look:  # the keeper woken was exiting: the next one takes it
                keeper, next_look = ensure_keeper(run_dir, run_id, workdir), time.time() + 0.5
            time.sleep(0.005)
    failed = {n: s["error"] for n, s in started.items() if s["error"]}
    if failed:
        raise AgentError("spawn_failed", "; ".join(failed.values()), tasks=started)
    return {"tasks": started, "keeper_pid": keeper}


def ensure_keeper(run_dir: str, run_id: str, workdir: str) -> int | None:
    """The run's keeper, woken to take its requests, or started when none runs; its pid (None
    while one that is starting has not recorded it yet)."""
    import fcntl
    import signal

    lock = os.open(os.path.join(run_dir, KEEPER_LOCK), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            held = False
        except BlockingIOError:  # a keeper holds it
            held = True
        except OSError:  # no locks on this file system (an NFS without lockd): the record says
            held = False
        record = read_json(os.path.join(run_dir, KEEPER_PID)) or {}
        if recorded_alive(record):  # (only where the lock is held, or locks are missing)
            send_signal(int(record["pid"]), signal.SIGUSR1)  # wake it to take the requests
            return int(record["pid"])
        if held:
            return None  # starting: it looks for requests once it has recorded itself
        import subprocess  # noqa: F401  # imported once here: not by each task's thread, in turn
        import threading  # noqa: F401

        return fork_detached(lambda: keeper_main(run_dir, run_id, workdir),
                             os.path.join(run_dir, "keeper.log"), keep=(lock,))
    finally:
        os.close(lock)  # the keeper holds its own copy of the lock for as long as it lives


def keeper_alive(run_dir: str) -> bool:
    """The run's keeper (its pid record, same boot, same start time) runs."""
    return recorded_alive(read_json(os.path.join(run_dir, KEEPER_PID)))


def orphans(run_dir: str, manifest: dict[str, Any]) -> list[dict[str, Any]]:
    """The tasks of this host that run while no keeper keeps them (theirs was killed): to be
    taken back. A task of another boot is lost, not an orphan."""
    found = []
    for task in manifest.get("tasks", []):
        record = read_json(task_file(run_dir, task["name"], ".pid.json"))
        if record and not from_other_boot(record) and recorded_alive(record) and \
                not supervisor_alive(record) and \
                not os.path.exists(task_file(run_dir, task["name"], ".exit.json")):
            found.append(task)
    return found


def take_back_orphans(run_dir: str, run_id: str, workdir: str,
                      manifest: dict[str, Any]) -> dict[str, Any] | None:
    """Where some of the run's tasks run with no keeper, start one that takes them back: which
    and by whom (None where there are none)."""
    names = [t["name"] for t in orphans(run_dir, manifest)]
    if not names or keeper_alive(run_dir):
        return None
    gone = read_json(os.path.join(run_dir, KEEPER_PID)) or {}
    pid = ensure_keeper(run_dir, run_id, workdir)
    deadline = time.time() + TAKE_BACK_WAIT_S  # until their records name it (status reads them)
    while time.time() < deadline and any(
            (read_json(task_file(run_dir, n, ".pid.json")) or {}).get("supervisor_pid") != pid
            for n in names):
        time.sleep(0.005)
    return {"tasks": names, "keeper_pid": pid, "gone_pid": gone.get("pid")}


class Keeper:
    """The keeper's state: its tasks' supervisions (threads), and the wake-ups of its loops."""

    def __init__(self, run_dir: str, run_id: str, workdir: str) -> None:
        import threading

        self.run_dir, self.run_id, self.workdir = run_dir, run_id, workdir
        self.manifest = load_manifest(run_dir)
        self.me = (os.getpid(), start_ticks(os.getpid()))
        self.threads: dict[str, Any] = {}
        self.supervisions: list[TaskSupervision] = []
        self.lock = threading.Lock()
        self.wake = threading.Event()
        """Set when a task ends: the watch's next tick comes at once."""
        self.closing = False
        self.wake_read, self.wake_write = os.pipe()
        for fd in (self.wake_read, self.wake_write):
            os.set_blocking(fd, False)

    def tasks_running(self) -> bool:
        """Some task's thread still runs. Asked by the SIGTERM handler too, while the requests'
        thread may add to `threads`: it looks at a copy (made at once, under the GIL)."""
        return any(thread.is_alive() for thread in list(self.threads.values()))

    def take_requests(self) -> None:
        """Start the tasks asked for (`<task>.launch`) and take back those running unkept."""
        with self.lock:
            if self.closing:
                return
            unkept = [t["name"] for t in orphans(self.run_dir, self.manifest)]
            for task in self.manifest.get("tasks", []):
                name = task["name"]
                if name in self.threads and self.threads[name].is_alive():
                    continue
                request = task_file(self.run_dir, name, LAUNCH_REQUEST)
                if os.path.exists(request):
                    os.unlink(request)
                    self._start(task, None)
                elif name in unkept:
                    self._start(task, read_json(task_file(self.run_dir, name, ".pid.json")))

    def _start(self, task: dict[str, Any], adopt: dict[str, Any] | None) -> None:
        import threading

        supervision = TaskSupervision(self.run_dir, self.run_id, task, self.workdir, self.me,
                                      adopt)
        self.supervisions.append(supervision)

        def body() -> None:
            try:
                supervision.run()
            except BaseException:
                import traceback

                traceback.print_exc()  # into keeper.log
            finally:
                self.wake.set()
                self.poke()

        thread = threading.Thread(target=body, name=task["name"], daemon=True)
        self.threads[task["name"]] = thread
        thread.start()

    def poke(self) -> None:
        with contextlib.suppress(OSError):  # a full pipe is a wake-up pending already
            os.write(self.wake_write, b"!")

    def serve_requests(self) -> None:
        """The requests' thread: a look at each wake-up (SIGUSR1, a task's end), and every
        KEEPER_POLL_S."""
        import select

        while True:
            select.select([self.wake_read], [], [], KEEPER_POLL_S)
            try:
                while os.read(self.wake_read, 512):
                    pass
            except OSError:
                pass
            self.take_requests()

    def done(self) -> bool:
        """Nothing left to keep: no task runs and none is asked for. From then on the keeper
        takes no request (the agent that left one starts the next keeper)."""
        with self.lock:
            pending = any(os.path.exists(task_file(self.run_dir, t["name"], LAUNCH_REQUEST))
                          for t in self.manifest.get("tasks", []))
            if self.tasks_running() or pending:
                return False
            self.closing = True
            return True


def keeper_main(run_dir: str, run_id: str, workdir: str) -> int:
    """The keeper's process: detached, holding `keeper.lock` (inherited)."""
    import signal
    import threading

    try:
        with open("/proc/self/comm", "w") as comm:
            comm.write("tfctl-keeper")
    except OSError:
        pass  # only cosmetic: how `ps`/`top` name this process
    keeper = Keeper(run_dir, run_id, workdir)

    def on_term(signum: int, frame: Any) -> None:
        if not keeper.tasks_running():
            raise StopWatching  # (a BaseException: nothing on the way swallows it)
        print(f"SIGTERM ignored: tasks of run {run_id} still run here", flush=True)

    # Python handlers, not SIG_IGN, which the tasks would inherit through exec.
    for sig in (signal.SIGINT, signal.SIGHUP, signal.SIGUSR1):
        signal.signal(sig, lambda *_: None)
    signal.signal(signal.SIGTERM, on_term)
    signal.set_wakeup_fd(keeper.wake_write)  # SIGUSR1 wakes the requests' thread
    write_json(os.path.join(run_dir, KEEPER_PID),
               dict(boot_record(), pid=keeper.me[0], start_ticks=keeper.me[1]))
    keeper.take_requests()
    for supervision in keeper.supervisions:  # the tasks' start first: `up` waits for it, and
        supervision.started.wait(FIRST_START_S)  # the watch's own start would slow it
    threading.Thread(target=keeper.serve_requests, name="requests", daemon=True).start()
    try:
        if keeper.manifest.get("end") and not os.path.exists(os.path.join(run_dir,
                                                                            "finished.json")):
            watch_job(run_dir, run_id, keeper.wake)  # (a run ended before: its end is applied)
            signal.signal(signal.SIGTERM, on_term)
        while not keeper.done():
            keeper.wake.wait(KEEPER_POLL_S)
            keeper.wake.clear()
    except StopWatching:
        pass  # no task runs: nothing is left to keep
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    return 0
