"""A session's parts that need no host: its plan and record, the Jupyter probe's answer, the
notebook's activity judged from Jupyter's kernels, and the shell's keeper, run by a real `sh`
over a real process standing for the shell."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tfctl.inventory.session import (
    SessionError,
    install_command,
    keeper_argv,
    missing_jupyter,
    notebook_argv,
    read_jupyter,
    session_of,
    session_record,
)
from tfctl.remote.agent.activity import active, start_activity
from tfctl.remote.agent.claims import parse_claim
from tfctl.remote.lab.claims import claim_of
from tfctl.remote.lab.view import Holder
from tfctl.remote.session import shell_line


def test_a_session_record_is_a_one_off_record_with_its_kind() -> None:
    record = session_record("notebook", ("jupyter", "lab"), port=8890, token_file="t")
    assert record["command"] == "jupyter lab" and record["session"] == "notebook"
    assert (record["port"], record["token_file"], record["sweep"]) == (8890, "t", None)
    assert session_of(record) == "notebook" and session_of({"command": "x"}) == ""
    assert session_of(None) == ""
    with pytest.raises(SessionError):
        session_record("kernel", ())


def test_lab_says_a_session_by_its_kind() -> None:
    holder = Holder("run", "alice", 10, None, None, 0.0, "r1", "lab", "worker:0",
                    session="notebook")
    assert holder.who_what() == ("alice", "notebook r1 (job lab) worker:0")
    assert Holder("run", "alice", 10, run_id="r2", task="worker:0").who_what()[1] == \
        "run r2 worker:0"
    raw = parse_claim({"format": "tfctl-claim/1", "kind": "run", "run_id": "r1",
                       "session": "shell", "gpus": [0], "tasks": []})
    claim = claim_of("h1", dict(raw, file="f", user="alice", uid=1000, state="live"))
    assert claim.session == "shell"


def test_the_notebook_argv_keeps_its_token_off_the_command_line() -> None:
    argv = notebook_argv("/venv/bin/python", "jupyterlab", 8890, ".tfctl/sessions/a.token")
    assert argv[:2] == ("sh", "-c") and "JUPYTER_TOKEN" in argv[2]
    assert argv[4:8] == (".tfctl/sessions/a.token", "/venv/bin/python", "-m", "jupyterlab")
    assert "--ServerApp.ip=127.0.0.1" in argv and "--ServerApp.port=8890" in argv
    assert not any(a.startswith("--") and "token" in a.lower() for a in argv)


def test_the_wrapper_hands_jupyter_its_token_from_the_file(tmp_path: Path) -> None:
    (tmp_path / "t").write_text("s3cret\n")
    argv = notebook_argv(sys.executable, "x", 1, "t")
    show = "import os, sys; print(os.environ['JUPYTER_TOKEN'], sys.argv[1:])"
    wrapper = [*argv[:5], sys.executable, "-c", show, "--no-browser"]
    out = subprocess.run(wrapper, cwd=tmp_path, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "s3cret ['--no-browser']"


def test_the_probe_answer_says_which_jupyter() -> None:
    lab = read_jupyter('noise\nJUPYTER {"versions": {"jupyterlab": "4.6.6", "jupyter_server": '
                       '"2.21.0", "ipykernel": "7.4.0"}, "modules": ["jupyterlab", '
                       '"jupyter_server"]}\n')
    assert lab is not None and lab.module == "jupyterlab" and lab.usable
    assert lab.words() == "JupyterLab 4.6.6 (ipykernel 7.4.0)"
    server = read_jupyter('JUPYTER {"versions": {"jupyter_server": "2.21.0"}, '
                          '"modules": ["jupyter_server"]}')
    assert server is not None and not server.usable
    assert server.words() == "Jupyter Server 2.21.0, but no ipykernel"
    none = read_jupyter('JUPYTER {"versions": {}, "modules": []}')
    assert none is not None and none.module is None and none.words() == "no Jupyter server"
    assert read_jupyter("python3: not found") is None
    said = missing_jupyter("h1", "/usr/bin/python3", none)
    assert said == ("h1's python (/usr/bin/python3) has no Jupyter, so no notebook can start "
                    "there: install it with `/usr/bin/python3 -m pip install jupyterlab "
                    "ipykernel` on h1 (or in `job.setup`)")
    assert install_command("~/my venv/bin/python").startswith("'~/my venv/bin/python' -m pip")


def test_a_kernel_busy_or_newly_active_is_activity() -> None:
    seen: dict[str, str] = {}
    idle = {"id": "k1", "execution_state": "idle", "last_activity": "t1"}
    assert active([idle], seen)  # a kernel just started
    assert not active([idle], seen)  # nothing since
    assert active([dict(idle, execution_state="busy")], seen)
    assert active([dict(idle, last_activity="t2")], seen)
    assert not active([dict(idle, last_activity="t2")], seen)
    assert not active([], seen) and seen == {}


def test_only_a_notebook_session_gets_an_activity_thread(tmp_path: Path) -> None:
    assert start_activity(str(tmp_path), {"oneoff": {"session": "shell"}}) is None
    assert start_activity(str(tmp_path), {}) is None


def _keeper(workdir: Path, run_id: str) -> subprocess.Popen[str]:
    (workdir / ".tfctl" / "runs" / run_id).mkdir(parents=True)
    return subprocess.Popen(list(keeper_argv()), cwd=workdir, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            env={**os.environ, "TFCTL_RUN_ID": run_id})


def test_the_keeper_lives_as_long_as_its_shell(tmp_path: Path) -> None:
    keeper = _keeper(tmp_path, "r1")
    run_dir = tmp_path / ".tfctl" / "runs" / "r1"
    line = shell_line(str(tmp_path), {"CUDA_VISIBLE_DEVICES": "1"}, ".tfctl/runs/r1",
                      ["sh", "-c", "echo mask=$CUDA_VISIBLE_DEVICES; sleep 2"])
    shell = subprocess.run(["sh", "-c", line], capture_output=True, text=True, timeout=30)
    assert shell.stdout == "mask=1\n", shell
    out, _ = keeper.communicate(timeout=10)
    assert keeper.returncode == 0
    assert "joined" in out and out.rstrip().endswith("tfctl: the shell ended"), out
    assert (run_dir / "activity").exists()


def test_the_keeper_hangs_up_its_shell_when_stopped(tmp_path: Path) -> None:
    keeper = _keeper(tmp_path, "r2")
    line = shell_line(str(tmp_path), {}, ".tfctl/runs/r2", ["sleep", "60"])
    shell = subprocess.Popen(["sh", "-c", line], start_new_session=True)
    pid_file = tmp_path / ".tfctl" / "runs" / "r2" / "shell.pid"
    deadline = time.monotonic() + 10
    while not pid_file.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert pid_file.read_text().split()[0] == str(shell.pid)  # exec: the shell's own pid
    time.sleep(0.5)  # the keeper has read it
    keeper.terminate()
    assert shell.wait(timeout=10) == -1  # SIGHUP
    keeper.wait(timeout=10)


def test_a_keeper_no_shell_joins_ends_on_its_own(tmp_path: Path) -> None:
    argv = list(keeper_argv())
    argv[2] = argv[2].replace("$((2 * 60))", "2")  # the script as shipped, its wait shorter
    argv[2] = argv[2].replace("within 60 s", "within 1 s")
    (tmp_path / ".tfctl" / "runs" / "r3").mkdir(parents=True)
    done = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=30,
                          env={**os.environ, "TFCTL_RUN_ID": "r3"})
    assert done.returncode == 1 and "no shell joined this session within 1 s" in done.stdout


class _LocalShell:
    """A transport's `run` on this machine (what `forget_ended_tokens` sends a host)."""

    def run(self, command: str, stdin: str | None = None, timeout_s: float | None = None
            ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["sh", "-c", command], input=stdin, capture_output=True,
                              text=True, timeout=timeout_s)


def test_only_the_live_notebooks_tokens_are_kept(tmp_path: Path) -> None:
    from tfctl.remote.session import forget_ended_tokens

    folder = tmp_path / ".tfctl" / "sessions"
    folder.mkdir(parents=True)
    for name in ("live.token", "ended.token", "other.txt"):
        (folder / name).write_text("x")
    forget_ended_tokens(_LocalShell(), str(tmp_path),  # type: ignore[arg-type]
                        [".tfctl/sessions/live.token"])
    assert sorted(p.name for p in folder.iterdir()) == ["live.token", "other.txt"]
    forget_ended_tokens(_LocalShell(), str(tmp_path / "none"), [])  # type: ignore[arg-type]
