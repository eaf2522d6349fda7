"""Helpers for end-to-end tests on the testbed: run the real CLI (at once, or watched in its own
session), read processes and ports on the hosts."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tests.support.testbed.testbed import Testbed
    from tests.support.testbed.users import LabUser

HERE = Path(__file__).parent
FOREVER = {"script": "job.py", "style": "tf_config", "args": ["--forever"]}
"""The light job (tests/support/lightjob.py as job.py) serving until stopped, TF_CONFIG style."""
FOREVER_FLAGS = {"script": "job.py", "style": "flags", "args": ["--forever"]}
"""The light job serving until stopped, told its place by flags (--job_name, --task_index...)."""


def tfctl(inventory: Path, *args: str, timeout: float = 240,
          env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run the real `tfctl` command line (a new process, as a user would)."""
    return subprocess.run([sys.executable, "-m", "tfctl.tui", "-i", str(inventory), *args],
                          capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})}, cwd=inventory.parent)


def job_dir(tmp: Path, script: str = "lightjob.py") -> Path:
    d = tmp / "job"
    d.mkdir(exist_ok=True)
    shutil.copy(HERE / script, d / "job.py")
    return d


def user_inventory(testbed: Testbed, user: LabUser, folder: Path, **kwargs: Any) -> Path:
    """`user`'s own inventory of the light job, serving until stopped, in `folder`/job (their
    key and login; `kwargs` as `Lab.write_user_inventory` takes them)."""
    folder.mkdir(parents=True, exist_ok=True)
    job_dir(folder)
    return testbed.write_user_inventory(user, folder / "job" / "cluster.yaml", FOREVER, **kwargs)


def environ_of(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes()
    return dict(kv.split("=", 1) for kv in raw.decode(errors="replace").split("\0") if "=" in kv)


def cmdline_of(pid: int) -> list[str]:
    return Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")[:-1]


def processes_of_run(run_id: str) -> dict[int, dict[str, str]]:
    """Every live process on this machine (all lab hosts share /proc) tagged with the run."""
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            env = environ_of(int(entry))
        except OSError:
            continue
        if env.get("TFCTL_RUN_ID") == run_id:
            found[int(entry)] = env
    return found


def run_tagged_pids(pids: list[int]) -> list[int]:
    """Those of `pids` (a lab host's processes) that carry any tfctl run tag; vanished ones skip."""
    tagged = []
    for pid in pids:
        try:
            if b"TFCTL_RUN_ID=" in Path(f"/proc/{pid}/environ").read_bytes():
                tagged.append(pid)
        except OSError:
            continue
    return tagged


def status_json(inventory: Path, connect_timeout_s: int | None = None) -> dict[str, Any]:
    """What `tfctl status --json` says (it must succeed); `connect_timeout_s`: its
    `--connect-timeout`, for a test that cuts a host off."""
    options = () if connect_timeout_s is None else ("--connect-timeout", str(connect_timeout_s))
    proc = tfctl(inventory, *options, "status", "--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    status: dict[str, Any] = json.loads(proc.stdout)
    return status


def run_id_from(output: str) -> str:
    for line in output.splitlines():
        if line.startswith("run ") and " is up" in line:
            return line.split()[1]
    raise AssertionError(f"no run id in output:\n{output}")


@dataclass(frozen=True)
class Up:
    """A `tfctl up` that succeeded: the run's id and what the command printed."""

    run_id: str
    stdout: str
    stderr: str


def up_ok(inventory: Path, *args: str) -> Up:
    """`tfctl up` with `args`, which must succeed (the fixture `up_run` also brings it down
    after the test)."""
    proc = tfctl(inventory, "up", *args)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return Up(run_id_from(proc.stdout), proc.stdout, proc.stderr)


EXAMPLES = HERE.parents[1] / "examples"


def examples_job_dir(tmp: Path, names: tuple[str, ...] = ("train.py", "evaluate.py",
                                                          "digits.py")) -> Path:
    """`tmp/job` holding the bundled trainer's files: the source folder of a real TF job."""
    d = tmp / "job"
    d.mkdir()
    for name in names:
        shutil.copy(EXAMPLES / name, d / name)
    return d


def task_pid(run_id: str, task: str) -> int | None:
    """The task's own process (a tagged process that is not its keeper), if it runs."""
    for pid, env in processes_of_run(run_id).items():
        if env.get("TFCTL_TASK") != task:
            continue
        try:
            if Path(f"/proc/{pid}/comm").read_text().strip() != "tfctl-keeper":
                return pid
        except OSError:
            continue
    return None


def aliased_jump_inventory(testbed: Any, tmp: Path, job: dict[str, Any], *, include: bool = False,
                           folder: Path | None = None) -> tuple[Path, Path]:
    """(inventory, home): h1 and h2 named only by ~/.ssh/config aliases in `home` (`box1`,
    `box2`, with address, port, user and key), h2 reached through h1 (ProxyJump box1); the
    inventory says no user, port or key of its own. Run tfctl with HOME=home. `include`: the
    aliases are in `~/.ssh/config.d/lab.conf`, which the config Includes (by its full path:
    OpenSSH expands `~` from the account, not $HOME); `folder`: the job's folder (default: a
    new one with job.py). No host can resolve the aliases (the lab's /etc/hosts names h1..hN)."""
    import yaml

    home = tmp / "home"
    (home / ".ssh" / "config.d").mkdir(parents=True)
    h1, h2 = testbed.host("h1"), testbed.host("h2")
    aliases = (f"Host box1\n  HostName {h1.address}\n  Port {h1.port}\n  User {testbed.user}\n"
               f"  IdentityFile {testbed.key}\n"
               f"Host box2\n  HostName {h2.address}\n  Port {h2.port}\n  User {testbed.user}\n"
               f"  IdentityFile {testbed.key}\n  ProxyJump box1\n")
    if include:
        (home / ".ssh" / "config.d" / "lab.conf").write_text(aliases)
        (home / ".ssh" / "config").write_text(f"Include {home}/.ssh/config.d/*.conf\n")
    else:
        (home / ".ssh" / "config").write_text(aliases)
    data = testbed.inventory_dict(job, hosts=["h1", "h2"])
    for entry, alias in zip(data["hosts"], ("box1", "box2"), strict=True):
        entry["address"] = alias
        entry.pop("port", None)
    for key in ("user", "port", "identity_file"):
        data["defaults"].pop(key)
    inv = (folder or job_dir(tmp)) / "cluster.yaml"
    inv.write_text(yaml.safe_dump(data))
    return inv, home


def wait_until(what: str, check: Any, timeout_s: float, every_s: float = 0.5) -> Any:
    """`check()`'s first truthy answer, asked every `every_s`; an AssertionError naming `what`
    once `timeout_s` has passed without one."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(every_s)
    raise AssertionError(f"no {what} within {timeout_s:g} s")


class Watched:
    """A tfctl command in its own session (like a terminal's foreground job: SIGINT and SIGHUP
    at their defaults, whatever the suite was started with), output collected."""

    def __init__(self, argv: list[str], cwd: Path):
        from tests.support.signals import from_a_terminal

        self.proc = subprocess.Popen([sys.executable, "-m", "tfctl.tui", *argv], cwd=cwd,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                     start_new_session=True, preexec_fn=from_a_terminal)
        self.out: list[str] = []
        self.err: list[str] = []
        self.readers = [threading.Thread(target=self._read, args=(s, into), daemon=True)
                        for s, into in ((self.proc.stdout, self.out), (self.proc.stderr, self.err))]
        for reader in self.readers:
            reader.start()

    @staticmethod
    def _read(stream: Any, into: list[str]) -> None:
        for line in stream:
            into.append(line)

    @property
    def text(self) -> str:
        return "".join(self.out) + "".join(self.err)

    @property
    def run_id(self) -> str | None:
        """The run's id, once the command said it (`tfctl: run ID ...` on its stderr)."""
        for line in self.err:
            if line.startswith("tfctl: run "):
                return line.split()[2]
        return None

    def started(self, kind: str) -> set[str]:
        """The tasks of `kind` (a prefix: "worker", "ps") of its run whose processes run."""
        return started_tasks(self.run_id, kind)

    def wait_for(self, probe: Callable[[], bool], what: str, timeout_s: float = 60) -> None:
        deadline = time.monotonic() + timeout_s
        while not probe():
            if self.proc.poll() is not None:
                raise AssertionError(f"tfctl exited {self.proc.returncode} before {what}:\n"
                                     f"{self.text}")
            if time.monotonic() > deadline:
                raise AssertionError(f"no {what} within {timeout_s:g} s:\n{self.text}")
            time.sleep(0.02)

    def ctrl_c(self) -> None:
        """What a terminal does: SIGINT to the whole foreground process group."""
        os.killpg(self.proc.pid, signal.SIGINT)

    def finish(self, timeout_s: float = 90) -> int:
        """Its exit status; one that has not ended within `timeout_s` is killed (its session
        with it), so that a failed test leaves nothing to the next."""
        try:
            code = self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()
            raise
        for reader in self.readers:
            reader.join(5)
        return code

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


def ctrl_c_up(inventory: Path, when: Callable[[Watched], bool], what: str,
              *options: str) -> Watched:
    """`tfctl up` with `options`, watched as from a terminal and Ctrl-C'd once `when` holds (`what`:
    its words for an error), while it still starts its tasks: it must end 130 within 20 s,
    without waiting for them. The run is brought down whatever happened; the command is
    returned, ended, for its output."""
    w = Watched(["-i", str(inventory), "up", *options], inventory.parent)
    try:
        w.wait_for(lambda: when(w), what)
        w.ctrl_c()
        assert w.finish(timeout_s=20) == 130, w.text
    finally:
        w.kill()
        tfctl(inventory, "down", "--grace", "1")
    return w


def bound_ports(testbed: Any, ports: set[int]) -> dict[str, list[str]]:
    found = {}
    for host in testbed.names:
        rows = testbed.run(host, "ss -Hltn").stdout.splitlines()
        held = [r for r in rows if any(f":{p} " in r for p in ports)]
        if held:
            found[host] = held
    return found


def started_tasks(run_id: str | None, kind: str) -> set[str]:
    if run_id is None:
        return set()
    return {env["TFCTL_TASK"] for env in processes_of_run(run_id).values()
            if env.get("TFCTL_TASK", "").startswith(kind)}


def ssh_sessions(testbed: Testbed, host: str) -> list[int]:
    """The host's sshd processes serving connections (all sshd but the listener)."""
    listener = testbed.sshd_pid(host)
    found = []
    for pid in testbed.pids_in(host):
        try:
            comm = Path(f"/proc/{pid}/comm").read_text().strip()
        except OSError:
            continue
        if comm.startswith("sshd") and pid != listener:
            found.append(pid)
    return found


def kill_ssh_sessions(testbed: Testbed, host: str) -> list[int]:
    """SIGKILL every SSH session on the host: every client connected to it sees it drop."""
    killed = []
    for pid in ssh_sessions(testbed, host):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)
    return killed
