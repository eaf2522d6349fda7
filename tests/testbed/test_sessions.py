"""`tfctl shell` and `tfctl notebook` on the testbed: interactive sessions on free GPUs, claimed,
released when they end.

The shell runs in a real terminal (tmux); the notebook's Jupyter (a cached venv of JupyterLab
and ipykernel, tests/support/jupytervenv.py) is reached through the tunnel by headless Chromium,
which loads JupyterLab and, from its page, starts a kernel and runs a cell (Jupyter's REST and
websocket API, as JupyterLab itself does). The GPUs are the test-only nvidia-smi stand-in's.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tests.support.testbed.testbed import Testbed
from tests.support.testbedtools import FOREVER, job_dir, processes_of_run, tfctl, wait_until
from tests.support.tmuxpane import Pane


def _inventory(testbed: Testbed, tmp_path: Path, hosts: list[str], python: str | None = None
               ) -> Path:
    extra = {"python": python} if python else {}
    return testbed.write_inventory(job_dir(tmp_path) / "cluster.yaml", FOREVER, hosts=hosts,
                                   gpus={h: [0, 1] for h in hosts}, ps={h: 0 for h in hosts},
                                   **extra)


def _holders(inv: Path) -> dict[tuple[str, int], list[str]]:
    """(host, GPU) → the run ids `tfctl lab` says hold it."""
    lab = tfctl(inv, "lab", "--json")
    assert lab.returncode == 0, lab.stdout + lab.stderr
    return {(r["host"], r["gpu"]): [h.get("run_id") for h in r["holders"] if h.get("run_id")]
            for r in json.loads(lab.stdout)}


def _session_in_lab(inv: Path, run_id: str) -> set[str]:
    """What `tfctl lab --json` calls the holders of `run_id` (their `session`)."""
    lab = json.loads(tfctl(inv, "lab", "--json").stdout)
    return {h.get("session") for r in lab for h in r["holders"] if h.get("run_id") == run_id}


def _held_by(inv: Path, run_id: str) -> list[tuple[str, int]]:
    return [gpu for gpu, runs in _holders(inv).items() if run_id in runs]


def _live_runs(inv: Path) -> dict[str, dict[str, Any]]:
    done = tfctl(inv, "runs", "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    return {r["run_id"]: r for r in json.loads(done.stdout)["runs"] if r.get("live")}


def _tfctl_line(inv: Path, *args: str) -> str:
    return (f"cd {shlex.quote(str(inv.parent))} && {shlex.quote(sys.executable)} -m tfctl.tui "
            f"-i {shlex.quote(str(inv))} {shlex.join(args)}")


def _new_run(inv: Path, before: set[str], timeout_s: float = 90) -> str:
    found: str = wait_until("the session's run live", lambda: next(
        iter(set(_live_runs(inv)) - before), None), timeout_s, every_s=1)
    return found


def test_a_shell_holds_its_gpu_while_its_command_runs_and_frees_it_after(
        gpu_testbed: Testbed, tmp_path: Path) -> None:
    inv = _inventory(gpu_testbed, tmp_path, ["h1"])
    before = set(_live_runs(inv))
    pane = Pane(_tfctl_line(inv, "shell", "--gpus", "1", "--", "sh", "-c",
                            "echo mask=$CUDA_VISIBLE_DEVICES; sleep 5")
                + "; echo tfctl-exit=$?; exec sleep 600",
                env={**os.environ, "TERM": "xterm-256color"}, name="tfctl-shell")
    try:
        run_id = _new_run(inv, before)
        screen = pane.wait("the mask", lambda s: "mask=" in s, timeout_s=60)
        mask = screen.split("mask=")[1].split()[0]
        assert mask in ("0", "1"), screen
        lab = json.loads(tfctl(inv, "lab", "--json").stdout)  # one look, while it runs
        assert {((r["host"], r["gpu"]), h.get("session")) for r in lab for h in r["holders"]
                if h.get("run_id") == run_id} == {(("h1", int(mask)), "shell")}
        status = json.loads(tfctl(inv, "status", "--run", run_id, "--json").stdout)
        assert [(t["name"], t["session"]) for t in status["tasks"]] == [("worker:0", "shell")]
        assert tfctl(inv, "status", "--run", run_id).stdout.startswith(f"shell {run_id} ")
        screen = pane.wait("the shell's end", lambda s: "tfctl-exit=0" in s, timeout_s=60)
        assert f"shell {run_id} ended (exit 0)" in screen, screen
        wait_until("the GPU free", lambda: not _held_by(inv, run_id), 30)
        assert run_id not in _live_runs(inv)
        assert "tfctl shell" in tfctl(inv, "runs").stdout
    finally:
        pane.close()


def test_a_closed_terminal_ends_the_shell_and_releases_its_gpu(
        gpu_testbed: Testbed, tmp_path: Path) -> None:
    inv = _inventory(gpu_testbed, tmp_path, ["h1"])
    before = set(_live_runs(inv))
    pane = Pane(_tfctl_line(inv, "shell", "--gpus", "1"),
                env={**os.environ, "TERM": "xterm-256color"}, name="tfctl-shell-hup")
    try:
        run_id = _new_run(inv, before)
        wait_until("the shell's GPU held", lambda: _held_by(inv, run_id), 60)
        pane.keys("echo typed-$((6*7))", "Enter")
        pane.wait("the shell answering", lambda s: "typed-42" in s, timeout_s=30)
    finally:
        pane.close()  # the terminal closes: SIGHUP to tfctl, the connection drops
    wait_until("the GPU free after the terminal closed", lambda: not _held_by(inv, run_id), 60)
    wait_until("the session's run ended", lambda: run_id not in _live_runs(inv), 30)
    assert not processes_of_run(run_id)


def test_down_ends_a_shell(gpu_testbed: Testbed, tmp_path: Path) -> None:
    inv = _inventory(gpu_testbed, tmp_path, ["h1"])
    before = set(_live_runs(inv))
    pane = Pane(_tfctl_line(inv, "shell", "--gpus", "1", "--", "sleep", "300")
                + "; echo tfctl-exit=$?; exec sleep 600",
                env={**os.environ, "TERM": "xterm-256color"}, name="tfctl-shell-down")
    try:
        run_id = _new_run(inv, before)
        wait_until("the shell's GPU held", lambda: _held_by(inv, run_id), 60)
        down = tfctl(inv, "down", "--run", run_id, "--grace", "2")
        assert down.returncode == 0, down.stdout + down.stderr
        pane.wait("the shell hung up", lambda s: "tfctl-exit=" in s, timeout_s=30)
        assert not _held_by(inv, run_id) and not processes_of_run(run_id)
    finally:
        pane.close()


def test_no_free_gpu_refuses_a_shell(gpu_testbed: Testbed, tmp_path: Path,
                                     stranger: Any) -> None:
    stranger("h1", 0)
    stranger("h1", 1)
    inv = _inventory(gpu_testbed, tmp_path, ["h1"])
    before = set(_live_runs(inv))
    done = tfctl(inv, "shell", "--gpus", "1", "--", "true")
    assert done.returncode != 0
    assert "no 1 GPU free on one host now" in done.stderr and "--when-free" in done.stderr
    assert "Traceback" not in done.stderr and set(_live_runs(inv)) == before


# ---------------------------------------------------------------- the notebook

@pytest.fixture(scope="session")
def jupyter_python() -> Path:
    """The Jupyter venv's python (built on first use: about 30 s, once per machine)."""
    from tests.support.jupytervenv import jupyter_python as built

    return built()


def _free_local_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Notebook:
    """`tfctl notebook` in the foreground, as a user leaves it running; `url` what it printed."""

    def __init__(self, inv: Path, *args: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tfctl.tui", "-i", str(inv), "notebook", *args],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=inv.parent,
            env={k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY")})
        assert self.proc.stdout is not None
        self.line = self.proc.stdout.readline().strip()
        if "?token=" not in self.line:
            self.proc.kill()
            raise AssertionError(f"no address printed: {self.line!r}\n"
                                 f"{self.proc.stderr.read() if self.proc.stderr else ''}")
        self.run_id = self.line.split()[1]
        self.url = self.line.split(": ", 1)[1]
        self.base, _, self.token = self.url.partition("lab?token=")
        self.said: list[str] = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.said.append(line)

    def close(self) -> str:
        """Ctrl-C; all it said on stderr."""
        self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.reader.join(10)
        return "".join(self.said)


RUN_CELL = """async ([token, code]) => {
  const auth = {Authorization: 'token ' + token};
  const made = await fetch('/api/kernels', {method: 'POST', headers: auth, body: '{}'});
  const kernel = await made.json();
  const ws = new WebSocket(location.origin.replace('http', 'ws') + '/api/kernels/' + kernel.id
                           + '/channels?token=' + token);
  const msgId = 'tfctl-test-' + Date.now();
  return await new Promise((resolve, reject) => {
    let out = '';
    ws.onerror = () => reject('websocket error');
    ws.onopen = () => ws.send(JSON.stringify({
      header: {msg_id: msgId, msg_type: 'execute_request', username: 'test', session: msgId,
               version: '5.3', date: new Date().toISOString()},
      parent_header: {}, metadata: {}, channel: 'shell', buffers: [],
      content: {code: code, silent: false, store_history: false, user_expressions: {},
                allow_stdin: false, stop_on_error: true}}));
    ws.onmessage = (event) => {
      const msg = JSON.parse(event.data);
      if (msg.parent_header.msg_id !== msgId) return;
      if (msg.msg_type === 'stream') out += msg.content.text;
      if (msg.msg_type === 'error') out += msg.content.ename + ': ' + msg.content.evalue;
      if (msg.msg_type === 'status' && msg.content.execution_state === 'idle') {
        ws.close(); resolve({out: out, kernel: kernel.id});
      }
    };
  });
}"""
"""Run in JupyterLab's page: start a kernel, run `code` in it, its output (Jupyter's REST
and websocket API, jupyter/jupyter_server's kernels handlers and the messaging protocol)."""


def test_a_notebook_runs_a_cell_on_its_claimed_gpu_through_the_tunnel(
        gpu_testbed: Testbed, tmp_path: Path, jupyter_python: Path) -> None:
    from playwright.sync_api import sync_playwright

    from tests.support.webui import chromium

    inv = _inventory(gpu_testbed, tmp_path, ["h1"], python=str(jupyter_python))
    local = _free_local_port()
    notebook = Notebook(inv, "--gpus", "1", "--no-browser", "--port", str(local))
    run_id = notebook.run_id
    try:
        assert notebook.url.startswith(f"http://127.0.0.1:{local}/lab?token=")
        (gpu,) = _held_by(inv, run_id)
        assert gpu[0] == "h1" and _session_in_lab(inv, run_id) == {"notebook"}
        assert f"notebook {run_id}" in tfctl(inv, "lab", env={"COLUMNS": "200"}).stdout
        with sync_playwright() as pw:
            browser = chromium(pw)
            page = browser.new_page()
            page.goto(notebook.url)
            page.wait_for_selector("#jp-main-dock-panel", timeout=60_000)  # JupyterLab drew
            assert "JupyterLab" in page.title()
            ran = page.evaluate(RUN_CELL, [notebook.token,
                                           "import os; print(os.environ['CUDA_VISIBLE_DEVICES'])"])
            browser.close()
        assert ran["out"].strip() == str(gpu[1]), ran
        status = json.loads(tfctl(inv, "status", "--run", run_id, "--json").stdout)
        assert [(t["session"], t["state"]) for t in status["tasks"]] == [("notebook", "running")]
        activity = Path(status["tasks"][0]["cwd"] or "") / ".tfctl" / "runs" / run_id / "activity"
        started = time.time()
        wait_until("the kernel's activity recorded", lambda: activity.exists()
                   and activity.stat().st_mtime >= started - 10, 30)
        assert "tfctl notebook" in tfctl(inv, "runs").stdout
        said = notebook.close()
        assert "the notebook lives on" in said, said

        again = Notebook(inv, "--no-browser", "--port", str(local))  # reconnects
        assert (again.run_id, again.token) == (run_id, notebook.token)
        again.close()
        assert _held_by(inv, run_id) == [gpu]

        down = tfctl(inv, "down", "--run", run_id, "--grace", "2")
        assert down.returncode == 0, down.stdout + down.stderr
        wait_until("the GPU free", lambda: not _held_by(inv, run_id), 30)
        assert not processes_of_run(run_id)
    finally:
        notebook.proc.kill()
        tfctl(inv, "down", "--run", run_id, "--grace", "1")


def test_a_notebook_on_a_host_without_jupyter_says_how_to_install_it(
        gpu_testbed: Testbed, tmp_path: Path) -> None:
    inv = _inventory(gpu_testbed, tmp_path, ["h1"], python="/usr/bin/python3")
    before = set(_live_runs(inv))
    done = tfctl(inv, "notebook", "--no-browser")
    assert done.returncode != 0, done.stdout
    assert "has no Jupyter" in done.stderr and "-m pip install jupyterlab ipykernel" in \
        done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr
    assert set(_live_runs(inv)) == before


def test_a_taken_local_port_is_one_sentence(gpu_testbed: Testbed, tmp_path: Path) -> None:
    inv = _inventory(gpu_testbed, tmp_path, ["h1"])
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        done = tfctl(inv, "notebook", "--no-browser", "--port", str(port))
    assert done.returncode != 0
    assert f"local port {port} is taken on this machine" in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def test_a_shell_when_free_waits_in_the_queue_for_a_gpu(
        gpu_testbed: Testbed, tmp_path: Path, stranger: Any) -> None:
    stranger("h1", 0)
    second = gpu_testbed.start_on_gpu("h1", 1)  # a colleague's job, ended below
    inv = _inventory(gpu_testbed, tmp_path, ["h1"])
    pane = Pane(_tfctl_line(inv, "shell", "--gpus", "1", "--when-free", "--", "sh", "-c",
                            "echo mask=$CUDA_VISIBLE_DEVICES")
                + "; echo tfctl-exit=$?; exec sleep 600",
                env={**os.environ, "TERM": "xterm-256color"}, name="tfctl-shell-wait")
    try:
        pane.wait("the shell waiting", lambda s: "waiting in the lab's queue for 1 free GPU" in s,
                  timeout_s=90, never=lambda s: "mask=" in s and "a GPU taken before it freed")
        os.kill(second, signal.SIGKILL)
        screen = pane.wait("the shell on the freed GPU", lambda s: "tfctl-exit=0" in s,
                           timeout_s=90)
        assert "mask=1" in screen, screen
    finally:
        pane.close()
        with contextlib.suppress(ProcessLookupError):
            os.kill(second, signal.SIGKILL)


def _get(url: str) -> int:
    import urllib.request

    try:
        with urllib.request.urlopen(url, timeout=5) as answer:
            return int(answer.status)
    except OSError:
        return 0


def test_a_notebook_lives_through_a_cut_host_and_its_tunnel_heals(
        gpu_testbed: Testbed, healed: Testbed, tmp_path: Path, jupyter_python: Path) -> None:
    if not healed.isolated:
        pytest.skip("needs the network-namespace lab (a host cut off)")
    inv = _inventory(gpu_testbed, tmp_path, ["h1"], python=str(jupyter_python))
    notebook = Notebook(inv, "--gpus", "1", "--no-browser", "--port", str(_free_local_port()))
    status_url = f"{notebook.base}api/status?token={notebook.token}"
    try:
        assert _get(status_url) == 200
        healed.cut("h1")
        wait_until("the tunnel noticing the cut", lambda: "lost" in "".join(notebook.said), 60)
        healed.heal("h1")
        wait_until("Jupyter through the healed tunnel", lambda: _get(status_url) == 200, 60)
        assert notebook.proc.poll() is None  # the same tunnel, never reopened
        status = json.loads(tfctl(inv, "status", "--run", notebook.run_id, "--json").stdout)
        assert [t["state"] for t in status["tasks"]] == ["running"]
        said = notebook.close()
        assert "lost" in said and "reconnected" in said, said
    finally:
        notebook.proc.kill()
        tfctl(inv, "down", "--run", notebook.run_id, "--grace", "1")


def test_check_says_which_jupyter_each_host_has(gpu_testbed: Testbed, tmp_path: Path,
                                                jupyter_python: Path) -> None:
    inv = _inventory(gpu_testbed, tmp_path, ["h1"], python=str(jupyter_python))
    found = json.loads(tfctl(inv, "check", "--json").stdout)
    (h1,) = [h["findings"] for h in found["hosts"] if h["host"] == "h1"]
    assert any(f["level"] == "info" and f["text"].startswith("notebook: JupyterLab 4.")
               and "(ipykernel " in f["text"] for f in h1), h1
    (tmp_path / "bare").mkdir()
    bare = _inventory(gpu_testbed, tmp_path / "bare", ["h1"], python="/usr/bin/python3")
    found = json.loads(tfctl(bare, "check", "--json").stdout)
    (h1,) = [h["findings"] for h in found["hosts"] if h["host"] == "h1"]
    assert any(f["text"] == "notebook: no Jupyter server; `/usr/bin/python3 -m pip install "
               "jupyterlab ipykernel` installs what `tfctl notebook` needs" for f in h1), h1
