"""`job.setup` on the real sshd lab: a venv with a package from the registry, cached, re-run on
a touched requirements.txt, and a failing command that stops `up` before anything starts.

The lab hosts (network namespaces) have no route to the internet, so the package (`six`) is
fetched from the registry here with pip's own client and synced with the job, as a wheelhouse:
on the hosts the setup installs it offline with `--no-index --find-links wheels`.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.testbed.testbed import Testbed
from tests.support.testbedtools import (
    FOREVER,
    Up,
    cmdline_of,
    job_dir,
    processes_of_run,
    run_tagged_pids,
    status_json,
    tfctl,
)
from tfctl.remote.runs.current import state_file

pytestmark = pytest.mark.testbed

PS_ON_H1 = {"h1": 1, "h2": 0, "h3": 0}


@pytest.fixture(scope="module")
def wheelhouse(tmp_path_factory: pytest.TempPathFactory) -> Path:
    wheels = tmp_path_factory.mktemp("wheels")
    proc = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps",
                           "--only-binary=:all:", "-d", str(wheels), "six"],
                          capture_output=True, text=True, timeout=180)
    if proc.returncode != 0:
        pytest.skip(f"cannot fetch `six` from the package registry: {proc.stderr[-300:]}")
    return wheels


def _venv_job(tmp: Path, wheels: Path) -> Path:
    d = job_dir(tmp)
    (d / "wheels").mkdir(exist_ok=True)
    for wheel in wheels.iterdir():
        (d / "wheels" / wheel.name).write_bytes(wheel.read_bytes())
    (d / "requirements.txt").write_text("six\n")
    return d


def _venv_python(testbed: Testbed, name: str) -> Path:
    return testbed.host(name).workdir / ".venv" / "bin" / "python"


def _run_dirs(testbed: Testbed) -> dict[str, set[str]]:
    out = {}
    for host in testbed.hosts:
        runs = host.workdir / ".tfctl" / "runs"
        out[host.name] = set(os.listdir(runs)) if runs.is_dir() else set()
    return out


def test_setup_makes_venv_then_skips_then_reruns_on_touch(
        testbed: Testbed, tmp_path: Path, wheelhouse: Path, up_run: Callable[..., Up]) -> None:
    d = _venv_job(tmp_path, wheelhouse)
    py = testbed.python  # the hosts' interpreter (the lab shares this machine's)
    job = {**FOREVER, "setup_inputs": ["requirements.txt"], "setup": [
        # a plain venv (no --system-site-packages, so `six` must really land in it); pip runs
        # from the host's interpreter against the venv (`--python`), which saves ~3 s per host
        f"{py} -m venv --without-pip .venv",
        f"{py} -m pip --python .venv/bin/python install --no-index --find-links wheels "
        "-r requirements.txt"]}
    for host in testbed.hosts:  # a clean slate: no venv and no setup record from an earlier run
        subprocess.run(["rm", "-rf", str(host.workdir / ".venv"),
                        str(host.workdir / ".tfctl" / "setup")], check=True)
    inv = testbed.write_inventory(d / "cluster.yaml", job, ps=PS_ON_H1, host_fields={
        h: {"python": str(_venv_python(testbed, h))} for h in testbed.names})
    first = up_run(inv)
    for name in testbed.names:
        assert f"{name}: setup done in" in first.stdout
        assert f"setup {name}: [2/2] {py} -m pip" in first.stderr  # per-host progress
        venv = _venv_python(testbed, name)
        assert testbed.run(name, [str(venv), "-c", "import six, sys; "
                              "print(six.__file__.startswith(sys.prefix))"]
                       ).stdout.strip() == "True"
        setup_log = testbed.host(name).workdir / ".tfctl" / "runs" / first.run_id / "setup.log"
        assert "Successfully installed six" in setup_log.read_text()
    host_of = {t["name"]: t["host"] for t in status_json(inv)["tasks"]}
    tasks = processes_of_run(first.run_id)
    assert sorted(env["TFCTL_TASK"] for env in tasks.values()) == sorted(host_of)
    for pid, env in tasks.items():  # every task runs the venv's python, as `python:` says
        assert cmdline_of(pid)[0] == str(_venv_python(testbed, host_of[env["TFCTL_TASK"]]))
    assert tfctl(inv, "down", "--grace", "1").returncode == 0

    second = up_run(inv)
    for name in testbed.names:
        assert f"{name}: setup skipped (inputs unchanged since" in second.stdout
    assert "setup done" not in second.stdout and "3 skipped" in second.stderr
    assert tfctl(inv, "down", "--grace", "1").returncode == 0

    later = os.stat(d / "requirements.txt").st_mtime + 10
    os.utime(d / "requirements.txt", (later, later))  # touch requirements.txt
    third = up_run(inv)
    for name in testbed.names:
        assert f"{name}: setup done in" in third.stdout


def test_failing_setup_stops_up_naming_host_and_command(testbed: Testbed, tmp_path: Path) -> None:
    failing = ('if [ "$(hostname)" = h2 ]; then echo "ERROR: no space left on $(hostname)" >&2; '
               "exit 3; fi")
    job = {**FOREVER, "setup": ["echo preparing", failing, "touch setup-finished"]}
    inv = testbed.write_inventory(job_dir(tmp_path) / "cluster.yaml", job, ps=PS_ON_H1)
    for host in testbed.hosts:
        (host.workdir / "setup-finished").unlink(missing_ok=True)
    runs_before = _run_dirs(testbed)
    try:
        proc = tfctl(inv, "up")
        assert proc.returncode == 1, proc.stdout + proc.stderr
        assert f"h2: setup failed: command 2/3 `{failing}` exited 3" in proc.stderr
        assert "    ERROR: no space left on h2" in proc.stderr  # the log's last lines
        assert "nothing was started" in proc.stderr and "Traceback" not in proc.stderr
        # the other hosts' setups ran to their end, and say so
        for name in ("h1", "h3"):
            assert f"{name}: setup done in" in proc.stdout
            assert (testbed.host(name).workdir / "setup-finished").exists()
        assert not (testbed.host("h2").workdir / "setup-finished").exists()
        # nothing launched: no new run directory, no process of any run on any host
        assert _run_dirs(testbed) == runs_before
        assert not Path(state_file(str(inv), "lab")).exists()
        for name in testbed.names if testbed.isolated else ():
            assert run_tagged_pids(testbed.pids_in(name)) == []
    finally:
        tfctl(inv, "down", "--grace", "1")
