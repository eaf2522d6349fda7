"""The host-side agent, run for real: `python -` with the program on stdin, real task processes.

Every check of "nothing is left" scans /proc here, independently of the agent's own scanner.
"""

from __future__ import annotations

import ast
import json
import os
import signal
import socket
import sys
import time
from pathlib import Path

import pytest

from tests.support.agentdriver import (
    SLEEPER,
    AgentDir,
    call,
    ok,
    pyt,
    sh,
    tagged,
    task,
    wait_for,
)
from tests.support.testbed.layout import free_port
from tfctl.remote.agent import freeports
from tfctl.remote.connect.session.program import (
    AGENT_FILES,
    CLIENT_ONLY_MODULES,
    DEFERRED_MODULES,
    agent_source,
    client_import_lines,
)

pytestmark = pytest.mark.timeout(60)


# ---------------------------------------------------------------- the program itself

def _cut_by_ast(text: str, of: tuple[str, ...] = CLIENT_ONLY_MODULES,
                from_too: bool = True) -> set[int]:
    cut: set[int] = set()
    for node in ast.parse(text).body:
        modules = [node.module or ""] if isinstance(node, ast.ImportFrom) and from_too else [
            alias.name for alias in node.names] if isinstance(node, ast.Import) else []
        if modules and all(m.split(".")[0] in of for m in modules):
            cut.update(range(node.lineno - 1, node.end_lineno or node.lineno))
    return cut


@pytest.mark.parametrize("name", AGENT_FILES)
def test_import_cut_matches_the_parser(name: str) -> None:
    """The program builder's line scan cuts exactly the imports Python's parser finds: those
    of client modules, and the `import` statements of the modules deferred to first use."""
    text = (Path(__file__).parents[2] / "remote" / "agent" / name).read_text()
    lines = text.splitlines(keepends=True)
    assert client_import_lines(lines) == _cut_by_ast(text)
    assert client_import_lines(lines, DEFERRED_MODULES, False) == \
        _cut_by_ast(text, DEFERRED_MODULES, False)


def test_import_cut_handles_the_forms_it_meets() -> None:
    """Parenthesised imports, several modules, comments; indented imports stay, and so do a
    child program's, held in a string."""
    lines = ["from tfctl.remote.agent.rundir import (\n", "    a,\n", "    b,\n", ")\n",
             "import os, typing\n", "import typing  # annotations\n",
             "from typing import Any\n", "    from tfctl import x\n", "import pathlib\n",
             'CHILD = r"""import json\n', "import json\n", 'print("""x""")\n', '"""\n',
             "import json\n"]
    assert client_import_lines(lines) == {0, 1, 2, 3, 5, 6, 8}
    assert client_import_lines(lines, DEFERRED_MODULES, False) == {13}


def _run_on_hosts(tree: ast.Module) -> list[ast.AST]:
    """Every node of the program but the bodies of `if MYPY:` (the type checker's own imports,
    which no host runs)."""
    found: list[ast.AST] = []
    todo: list[ast.AST] = [tree]
    while todo:
        node = todo.pop()
        found.append(node)
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "MYPY":
            todo += node.orelse
            continue
        todo += ast.iter_child_nodes(node)
    return found


def test_program_is_standalone_py38_stdlib() -> None:
    source = agent_source()
    nodes = _run_on_hosts(ast.parse(source, feature_version=(3, 8)))
    imported = {alias.name.split(".")[0] for node in nodes
                if isinstance(node, ast.Import) for alias in node.names}
    imported |= {(node.module or "").split(".")[0] for node in nodes
                 if isinstance(node, ast.ImportFrom)}
    assert "tfctl" not in imported
    assert imported <= set(sys.stdlib_module_names) | {"__future__"}
    # -S: no site-packages, so nothing of tfctl (or anything installed) can be imported.
    answer = call("probe", python_flags=("-S",), workdir="~/somewhere")
    assert answer["ok"], answer
    assert answer["result"]["workdir"] == os.path.join(os.path.expanduser("~"), "somewhere")


def test_probe_reports_interpreter_and_tools() -> None:
    from importlib import metadata

    result = ok("probe")
    assert result["python"] == ".".join(str(v) for v in sys.version_info[:3])
    assert result["executable"] == sys.executable
    assert result["tf_version"] == metadata.version("tensorflow-cpu")
    assert result["uid"] == os.getuid()
    assert result["hostname"] == socket.gethostname()
    assert result["rsync"] in (None, *[os.path.join(p, "rsync")
                                       for p in os.environ["PATH"].split(":")])


def test_errors_are_one_sentence_with_a_kind(agent_dir: AgentDir) -> None:
    assert call("frobnicate")["kind"] == "unknown_op"
    missing = call("status", workdir=agent_dir.workdir, run_id=None)
    assert missing["kind"] == "no_run" and not missing["ok"]
    assert call("prepare", workdir=agent_dir.workdir)["kind"] == "bad_request"
    run_id = agent_dir.prepare([sh("worker:0", SLEEPER)])
    bad = call("launch", workdir=agent_dir.workdir, run_id=run_id, tasks=["worker:9"])
    assert bad["kind"] == "unknown_task"
    assert tagged(run_id) == {}


# ---------------------------------------------------------------- launch, status, stop

def test_launch_status_stop_leaves_nothing(agent_dir: AgentDir) -> None:
    escaper = ("import subprocess, time; subprocess.Popen(['setsid', 'sleep', '60']); "
               "print('spawned', flush=True); time.sleep(60)")
    run_id = agent_dir.start([sh("worker:0", SLEEPER),
                        sh("ps:0", "trap '' TERM; echo stubborn; while :; do sleep 0.1; done"),
                        pyt("chief:0", escaper)])
    status = agent_dir.status(run_id)
    assert {t["state"] for t in status.values()} == {"running"}
    assert all(t["pgid"] != os.getpgrp() for t in status.values())
    wait_for(lambda: "spawned" in agent_dir.log(run_id, "chief:0")
             and "stubborn" in agent_dir.log(run_id, "ps:0"))
    chief_pgid = status["chief:0"]["pgid"]
    escaped = [pid for pid, name in tagged(run_id).items() if name == "chief:0"
               and os.getpgid(pid) != chief_pgid]
    assert escaped, "the setsid child should have left the chief's process group"

    result = ok("stop", workdir=agent_dir.workdir, run_id=run_id, tasks=None, grace_s=0.5)

    assert result["stopped"] == ["chief:0", "ps:0", "worker:0"]
    assert result["killed_after_grace"] == ["ps:0"]
    assert result["remaining_pids"] == [] and result["gpu_pids"] == []
    assert tagged(run_id) == {}
    after = agent_dir.status(run_id)
    assert {t["state"] for t in after.values()} == {"stopped"}
    assert after["ps:0"]["signal"] == "SIGKILL"
    assert "hi" in agent_dir.log(run_id, "worker:0")
    again = ok("stop", workdir=agent_dir.workdir, run_id=run_id, grace_s=0.5)
    assert (again["stopped"], again["killed_after_grace"], again["remaining_pids"]) == ([], [], [])


def test_stop_of_one_task_leaves_the_others(agent_dir: AgentDir) -> None:
    run_id = agent_dir.start([sh("worker:0", SLEEPER), sh("worker:1", SLEEPER)])
    result = ok("stop", workdir=agent_dir.workdir, run_id=run_id, tasks=["worker:1"], grace_s=1)
    assert result["stopped"] == ["worker:1"]
    assert set(tagged(run_id).values()) == {"worker:0"}
    status = agent_dir.status(run_id)
    assert (status["worker:0"]["state"], status["worker:1"]["state"]) == ("running", "stopped")


def test_stop_of_an_unknown_run_is_a_no_op(agent_dir: AgentDir) -> None:
    result = ok("stop", workdir=agent_dir.workdir, run_id="never-was", grace_s=0.1)
    assert result == {"stopped": [], "killed_after_grace": [], "remaining_pids": [],
                      "gpu_pids": [], "gpu_error": None}


def test_task_gets_its_env_cwd_and_log(agent_dir: AgentDir, tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    script = 'echo "$TFCTL_RUN_ID|$TFCTL_TASK|$CUDA_VISIBLE_DEVICES|$MY_VAR|$(pwd)"'
    env = {"MY_VAR": "x y", "CUDA_VISIBLE_DEVICES": "1"}
    run_id = agent_dir.start([sh("evaluator:0", script, env=env, cwd=str(tmp_path / "sub"))])
    agent_dir.wait_state(run_id, "evaluator:0", ("exited",))
    line = agent_dir.log(run_id, "evaluator:0").strip()
    assert line == f"{run_id}|evaluator:0|1|x y|{tmp_path / 'sub'}"
    files = sorted(p.name for p in Path(agent_dir.workdir, ".tfctl", "runs", run_id).iterdir())
    assert files == ["evaluator-0.exit.json", "evaluator-0.log", "evaluator-0.pid.json",
                     "keeper.lock", "keeper.log", "keeper.pid.json", "manifest.json"]


def test_exit_code_and_last_lines_are_recorded(agent_dir: AgentDir) -> None:
    run_id = agent_dir.start([sh("worker:0", "echo first; echo bye; exit 3")])
    done = agent_dir.wait_state(run_id, "worker:0", ("exited",))
    assert (done["exit_code"], done["signal"], done["restarts"]) == (3, None, 0)
    assert done["last_lines"] == ["first", "bye"]
    assert done["ended_at"] >= done["started_at"]
    # A failed task comes with more of its log than asked (the error line may sit above).
    assert agent_dir.status(run_id, tail=1)["worker:0"]["last_lines"] == ["first", "bye"]


def test_kill_9_shows_sigkill(agent_dir: AgentDir) -> None:
    run_id = agent_dir.start([sh("worker:0", SLEEPER)])
    pid = agent_dir.status(run_id)["worker:0"]["pid"]
    os.kill(pid, signal.SIGKILL)
    done = agent_dir.wait_state(run_id, "worker:0", ("killed",))
    assert (done["exit_code"], done["signal"]) == (None, "SIGKILL")


def test_lost_when_task_and_supervisor_vanish(agent_dir: AgentDir) -> None:
    run_id = agent_dir.start([sh("worker:0", SLEEPER)])
    status = agent_dir.status(run_id)["worker:0"]
    os.kill(status["supervisor_pid"], signal.SIGKILL)
    os.kill(status["pid"], signal.SIGKILL)
    assert agent_dir.wait_state(run_id, "worker:0", ("lost",))["state"] == "lost"


def _keeper_of(agent_dir: AgentDir, run_id: str) -> int:
    """The run's keeper, by its record; checked to be the process `ps` names `tfctl-keeper`."""
    path = Path(agent_dir.workdir, ".tfctl", "runs", run_id, "keeper.pid.json")
    pid = int(json.loads(path.read_text())["pid"])
    assert Path(f"/proc/{pid}/comm").read_text().strip() == "tfctl-keeper"
    return pid


def _children(pid: int) -> set[int]:
    """The live processes whose parent is `pid` (all of this machine's /proc)."""
    found = set()
    for name in filter(str.isdigit, os.listdir("/proc")):
        try:
            fields = Path(f"/proc/{name}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid and fields[0] not in ("Z", "X"):
            found.add(int(name))
    return found


def test_a_run_on_a_host_is_its_tasks_and_one_keeper(agent_dir: AgentDir) -> None:
    end = {"mode": "any", "deciders": [{"name": "worker:0", "host": "here"}]}
    run_id = agent_dir.start([sh("ps:0", SLEEPER), sh("worker:0", SLEEPER),
                              sh("worker:1", SLEEPER)], host="here", end=end)
    states = {n: agent_dir.wait_state(run_id, n, ("running",)) for n in
              ("ps:0", "worker:0", "worker:1")}
    keeper = _keeper_of(agent_dir, run_id)
    tasks = {s["pid"] for s in states.values()}
    assert {s["supervisor_pid"] for s in states.values()} == {keeper}
    assert _children(keeper) == tasks  # nothing else: no supervisor per task, no watcher
    assert set(tagged(run_id)) == tasks
    for state in states.values():  # each task leads its own group: a stop never hits the keeper
        assert os.getpgid(state["pid"]) == state["pid"] == state["pgid"] != os.getpgid(keeper)
    ok("stop", workdir=agent_dir.workdir, run_id=run_id, grace_s=1.0)
    assert not tagged(run_id)
    assert wait_for(lambda: not Path(f"/proc/{keeper}").exists() or
                    "zombie" in Path(f"/proc/{keeper}/status").read_text())


def test_a_task_started_again_joins_the_live_keeper(agent_dir: AgentDir) -> None:
    run_id = agent_dir.start([sh("worker:0", SLEEPER), sh("worker:1", SLEEPER)])
    first = agent_dir.wait_state(run_id, "worker:1", ("running",))
    keeper = _keeper_of(agent_dir, run_id)
    ok("stop", workdir=agent_dir.workdir, run_id=run_id, tasks=["worker:1"], grace_s=1.0)
    assert agent_dir.status(run_id)["worker:1"]["state"] == "stopped"
    assert _keeper_of(agent_dir, run_id) == keeper  # it keeps worker:0 still
    answer = ok("launch", workdir=agent_dir.workdir, run_id=run_id, tasks=["worker:1"])
    assert answer["keeper_pid"] == keeper  # woken, not a second keeper
    again = agent_dir.wait_state(run_id, "worker:1", ("running",))
    assert again["pid"] != first["pid"] and again["supervisor_pid"] == keeper
    assert _children(keeper) == {again["pid"], agent_dir.status(run_id)["worker:0"]["pid"]}


TALKER = "i=0; while true; do i=$((i+1)); echo line $i; sleep 0.05; done"
"""A task that writes a line every 50 ms for as long as it runs."""


def test_a_killed_keeper_loses_no_task_and_the_next_status_takes_them_back(
        agent_dir: AgentDir) -> None:
    run_id = agent_dir.start([sh("worker:0", TALKER), sh("worker:1", SLEEPER)])
    first = agent_dir.wait_state(run_id, "worker:0", ("running",))
    agent_dir.wait_state(run_id, "worker:1", ("running",))
    keeper = _keeper_of(agent_dir, run_id)
    os.kill(keeper, signal.SIGKILL)
    wait_for(lambda: not Path(f"/proc/{keeper}/comm").exists() or
             "zombie" in Path(f"/proc/{keeper}/status").read_text())
    # No keeper relays worker:0 now: its writes fill the pipe, then wait; nothing fails.
    before = agent_dir.log(run_id, "worker:0").count("\n")
    time.sleep(0.5)
    answer = ok("status", workdir=agent_dir.workdir, run_id=run_id, tail=1)
    taken = answer["taken_back"]
    assert taken["tasks"] == ["worker:0", "worker:1"] and taken["gone_pid"] == keeper
    new = _keeper_of(agent_dir, run_id)
    assert new not in (keeper, None) and taken["keeper_pid"] == new
    tasks = {t["name"]: t for t in answer["tasks"]}
    assert tasks["worker:0"]["pid"] == first["pid"] and tasks["worker:0"]["state"] == "running"
    assert {t["supervisor_pid"] for t in tasks.values()} == {new}
    assert ok("status", workdir=agent_dir.workdir, run_id=run_id)["taken_back"] is None
    # What it wrote while no keeper ran reached its log, in order, and it goes on.
    wait_for(lambda: agent_dir.log(run_id, "worker:0").count("\n") > before + 20)
    lines = [line for line in agent_dir.log(run_id, "worker:0").splitlines()
             if line.startswith("line ")]
    assert [int(line.split()[1]) for line in lines] == list(range(1, len(lines) + 1))
    assert "taken back by a new keeper" in agent_dir.log(run_id, "worker:0")
    os.kill(first["pid"], signal.SIGTERM)  # its end is seen, its status unknown (not our child)
    done = agent_dir.wait_state(run_id, "worker:0", ("exited", "killed"))
    assert (done["state"], done["exit_code"], done["signal"]) == ("exited", None, None)
    assert "its exit status is not known" in agent_dir.log(run_id, "worker:0")
    ok("stop", workdir=agent_dir.workdir, run_id=run_id, grace_s=1.0)
    assert not tagged(run_id)


def test_restart_on_failure_counts_and_marks_the_log(agent_dir: AgentDir) -> None:
    policy = {"policy": "on-failure", "max": 2, "backoff_s": 0.05}
    run_id = agent_dir.start([sh("worker:0", "echo attempt; exit 2", restart=policy)])
    done = agent_dir.wait_state(run_id, "worker:0", ("exited",))
    assert (done["exit_code"], done["restarts"]) == (2, 2)
    log = agent_dir.log(run_id, "worker:0").splitlines()
    assert log == ["attempt",
                   "==> tfctl: restarting worker:0 (restart 1/2) after exit 2", "attempt",
                   "==> tfctl: restarting worker:0 (restart 2/2) after exit 2", "attempt"]


def test_on_failure_does_not_restart_a_success(agent_dir: AgentDir) -> None:
    policy = {"policy": "on-failure", "max": 2, "backoff_s": 0.05}
    run_id = agent_dir.start([sh("worker:0", "echo done", restart=policy)])
    done = agent_dir.wait_state(run_id, "worker:0", ("exited",))
    assert (done["exit_code"], done["restarts"]) == (0, 0)


def test_launch_failure_is_reported(agent_dir: AgentDir) -> None:
    run_id = agent_dir.prepare([task("worker:0", ["/nonexistent/python", "-c", "pass"])])
    answer = call("launch", workdir=agent_dir.workdir, run_id=run_id)
    assert answer["kind"] == "spawn_failed" and "/nonexistent/python" in answer["error"]
    status = agent_dir.status(run_id)["worker:0"]
    assert (status["state"], status["exit_code"]) == ("exited", 127)


# ---------------------------------------------------------------- runs, prepare, finish

def test_prepare_refuses_while_a_run_is_live(agent_dir: AgentDir) -> None:
    first = agent_dir.start([sh("worker:0", SLEEPER)])
    refused = call("prepare", workdir=agent_dir.workdir, run_id="second",
                   manifest={"tasks": [sh("worker:0", SLEEPER)]})
    assert (refused["ok"], refused["kind"], refused["run_id"]) == (False, "run_live", first)
    ok("stop", workdir=agent_dir.workdir, run_id=first, grace_s=1)
    second = agent_dir.prepare([sh("worker:0", SLEEPER)])
    assert second != first


def test_runs_lists_newest_first_with_live_and_finished(agent_dir: AgentDir) -> None:
    old = agent_dir.prepare([sh("worker:0", "exit 0")], created_at=1000.0)
    ok("finish", workdir=agent_dir.workdir, run_id=old, status="succeeded")
    new = agent_dir.start([sh("worker:0", SLEEPER)], created_at=2000.0)
    runs = ok("runs", workdir=agent_dir.workdir)["runs"]
    assert [r["run_id"] for r in runs] == [new, old]
    assert [r["live"] for r in runs] == [True, False]
    assert runs[1]["finished"]["status"] == "succeeded" and runs[0]["finished"] is None
    assert ok("status", workdir=agent_dir.workdir, run_id=None)["run_id"] == new


# ---------------------------------------------------------------- ports

def test_ports_names_the_holder() -> None:
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        spare = free_port()
        report = {p["port"]: p for p in ok("ports", ports=[port, spare])["ports"]}
    assert report[spare]["free"] is True
    assert report[port]["free"] is False
    assert report[port]["pid"] == os.getpid() and report[port]["pgid"] == os.getpgrp()
    assert report[port]["cmdline"] == " ".join(Path("/proc/self/cmdline").read_bytes()
                                               .rstrip(b"\0").decode().split("\0"))


def test_wait_ports_returns_when_listening_and_reports_early_exit(agent_dir: AgentDir) -> None:
    port, crash_port, idle_port = free_port(), free_port(), free_port()
    server = ("import socket, time; time.sleep(0.3); s = socket.socket(); "
              "s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); "
              f"s.bind(('127.0.0.1', {port})); s.listen(); time.sleep(60)")
    run_id = agent_dir.start([pyt("ps:0", server, port=port),
                        sh("worker:0", "echo boom >&2; exit 1", port=crash_port),
                        sh("worker:1", SLEEPER, port=idle_port)])
    result = ok("wait_ports", workdir=agent_dir.workdir, run_id=run_id, tasks=["ps:0", "worker:0"],
                timeout_s=10)
    ps, crashed = result["tasks"]["ps:0"], result["tasks"]["worker:0"]
    assert result["ready"] is False
    assert (ps["state"], ps["pid"]) == ("listening", agent_dir.status(run_id)["ps:0"]["pid"])
    assert (crashed["state"], crashed["exit_code"], crashed["last_lines"]) == ("exited", 1,
                                                                               ["boom"])
    assert agent_dir.status(run_id)["worker:1"]["state"] == "starting"  # alive, port not yet open
    idle = ok("wait_ports", workdir=agent_dir.workdir, run_id=run_id, tasks=["worker:1"],
              timeout_s=0.3)["tasks"]["worker:1"]
    assert (idle["state"], idle["port_holder"]["free"]) == ("timeout", True)


def test_up_go_drops_the_port_leases_once_no_task_is_still_starting(agent_dir: AgentDir
                                                                     ) -> None:
    """A task that ended before the wait saw it listen (a short job) holds no port: its lease
    must not keep the port from the next `up` for LEASE_S (it moved that `up`'s tasks)."""
    port, token = free_port(), f"test-{os.getpid()}"
    assert freeports.choose_ports([{"task": "worker:0", "preferred": port}], port, port,
                                  token=token)["chosen"] == {"worker:0": port}
    lease = Path(freeports._lease_path(port))
    try:
        assert lease.exists()
        run_id = agent_dir.prepare([sh("worker:0", "exit 0", port=port)])
        go = ok("up_go", workdir=agent_dir.workdir, run_id=run_id, launch=["worker:0"],
                wait=["worker:0"], timeout_s=10, lease_token=token)
        assert go["waited"]["worker:0"]["state"] == "exited"
        assert not lease.exists()
    finally:
        freeports.release(token)


def test_listen_and_connect_for_preflight() -> None:
    port, closed = free_port(), free_port()
    listened = ok("listen", ports=[port], seconds=3)
    try:
        assert listened["bound"] == [port] and listened["busy"] == {}
        assert ok("listen", ports=[port], seconds=1)["busy"].keys() == {str(port)}
        results = ok("connect", targets=[f"127.0.0.1:{port}", f"127.0.0.1:{closed}",
                                         "nosuchhost.invalid:2222"], timeout_s=2)["targets"]
        assert [r["ok"] for r in results] == [True, False, False]
        assert results[1]["error"]
        # A name this host cannot resolve is said apart from a port that does not answer.
        assert [r["why"] for r in results] == [None, "refused", "unresolved"]
    finally:
        os.kill(listened["pid"], signal.SIGKILL)


# ---------------------------------------------------------------- logs

def test_logs_follow_by_offsets_and_tail(agent_dir: AgentDir) -> None:
    run_id = agent_dir.start([sh("worker:0", "echo one; echo two")])
    agent_dir.wait_state(run_id, "worker:0", ("exited",))
    first = ok("logs", workdir=agent_dir.workdir, run_id=run_id, offsets={})["logs"]["worker:0"]
    assert (first["data"], first["offset"]) == ("one\ntwo\n", 8)
    log = Path(agent_dir.workdir, ".tfctl", "runs", run_id, "worker-0.log")
    with log.open("ab") as f:
        f.write(b"caf" + "é".encode()[:1])  # a writer caught mid-character
    part = ok("logs", workdir=agent_dir.workdir, run_id=run_id, offsets={"worker:0": 8})["logs"]
    assert (part["worker:0"]["data"], part["worker:0"]["offset"]) == ("caf", 11)
    with log.open("ab") as f:
        f.write("é".encode()[1:] + b"\nlast\n")
    rest = ok("logs", workdir=agent_dir.workdir, run_id=run_id, offsets={"worker:0": 11})["logs"]
    assert rest["worker:0"]["data"] == "é\nlast\n"
    tail = ok("logs", workdir=agent_dir.workdir, run_id=run_id, offsets={"worker:0": -1},
              tail_lines=2)["logs"]["worker:0"]
    assert (tail["data"], tail["offset"]) == ("café\nlast\n", log.stat().st_size)
    reset = ok("logs", workdir=agent_dir.workdir, run_id=run_id, offsets={"worker:0": 10_000})
    assert reset["logs"]["worker:0"]["reset"] is True
    assert reset["logs"]["worker:0"]["data"].startswith("one\n")


def _packed(data: bytes) -> str:
    import base64
    import zlib

    return base64.b64encode(zlib.compress(data)).decode()


def test_put_files_writes_content_mode_and_mtime(tmp_path: Path) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "a.py").write_text("old\n")
    mtime_ns = 1_700_000_000_123_456_789
    answer = call("put_files", workdir=str(tmp_path), files=[
        ["pkg/a.py", 0o750, mtime_ns, _packed(b"new\n")], ["b.py", 0o644, mtime_ns, _packed(b"")]])
    assert answer["ok"], answer
    assert answer["result"] == {"written": ["pkg/a.py", "b.py"], "bytes": 4, "refused": None}
    st = (tmp_path / "pkg" / "a.py").stat()
    assert (tmp_path / "pkg" / "a.py").read_bytes() == b"new\n"
    assert (st.st_mode & 0o7777, st.st_mtime_ns) == (0o750, mtime_ns)
    assert sorted(p.name for p in tmp_path.rglob("*tmp*")) == []  # no temporary file left


@pytest.mark.parametrize("rel", ["../escaped.py", "/etc/escaped.py", "link/x.py", "linked.py",
                                 "missing/x.py", "adir"])
def test_put_files_refuses_paths_it_cannot_write_safely(tmp_path: Path, rel: str) -> None:
    """Outside the workdir, through a symlinked folder or onto a symlink, into a folder that does
    not exist, or onto a folder: refused (the client sends those with rsync), nothing written."""
    work, outside = tmp_path / "work", tmp_path / "outside"
    work.mkdir()
    outside.mkdir()
    (work / "link").symlink_to(outside)
    (work / "linked.py").symlink_to(outside / "target.py")
    (work / "adir").mkdir()  # a folder where the source has a file
    before = sorted(p.name for p in tmp_path.rglob("*"))
    answer = call("put_files", workdir=str(work), files=[
        ["ok.py", 0o644, 0, _packed(b"fine")], [rel, 0o644, 0, _packed(b"evil")]])
    assert answer["ok"], answer
    assert answer["result"]["written"] == ["ok.py"] and answer["result"]["refused"] == rel
    assert sorted(p.name for p in tmp_path.rglob("*")) == sorted([*before, "ok.py"])
    assert not (outside / "target.py").exists() and not (tmp_path / "escaped.py").exists()


def test_prepare_makes_the_output_folders_and_refuses_one_outside(agent_dir: AgentDir) -> None:
    agent_dir.prepare([sh("worker:0", "exit 0")], outputs=["out/train", "ckpt"])
    assert (Path(agent_dir.workdir) / "out" / "train").is_dir()
    assert (Path(agent_dir.workdir) / "ckpt").is_dir()
    refused = call("prepare", workdir=agent_dir.workdir, run_id="escape",
                   manifest={"tasks": [], "outputs": ["../elsewhere"]})
    assert (refused["ok"], refused["kind"]) == (False, "bad_request")
    assert not (Path(agent_dir.workdir).parent / "elsewhere").exists()
