"""`job.notify`: word of a run's end from the chief's host, with no client connected.

A webhook receiver runs in the test on the lab bridge's own address (the hosts' namespaces reach
it as they would reach a ntfy or Slack server); the notify command writes the TFCTL_* variables
it was given into a file of the chief host's workdir. Every tfctl command has exited (and the
tests hold no connections: TFCTL_PERSIST=0) by the time the run ends."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from tests.support.testbedtools import job_dir, run_id_from, tfctl

pytestmark = pytest.mark.testbed

COMMAND = 'env | grep "^TFCTL_" | grep -v "^TFCTL_NOTICE=" | sort > "notified-$TFCTL_RUN_ID.env"'


class Receiver:
    """An HTTP server that keeps every POST's JSON body."""

    def __init__(self, address: str) -> None:
        received: list[dict[str, Any]] = []

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                received.append({"path": self.path, "json": json.loads(body),
                                 "type": self.headers.get("Content-Type")})
                self.send_response(204)
                self.end_headers()

            def log_message(self, *_args: Any) -> None:
                pass

        self.received = received
        self.server = ThreadingHTTPServer((address, 0), Handler)
        self.url = f"http://{address}:{self.server.server_address[1]}/hook/tfctl"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def wait_for(self, run_id: str, timeout_s: float) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for post in self.received:
                if post["json"].get("run_id") == run_id:
                    return post
            time.sleep(0.2)
        raise AssertionError(f"no POST for {run_id} in {timeout_s:g} s: {self.received}")


@pytest.fixture
def receiver(testbed) -> Iterator[Receiver]:  # type: ignore[no-untyped-def]
    served = Receiver(testbed.gateway or "127.0.0.1")
    yield served
    served.server.shutdown()
    served.server.server_close()


def _inventory(testbed, tmp: Path, receiver: Receiver, args: list[str],  # type: ignore[no-untyped-def]
               strategy: str = "parameter_server", ps: int = 1, h1_workers: int = 1,
               **job_keys: Any) -> tuple[Path, Path]:
    workdir = Path(f"{testbed.host('h1').workdir}-notify-{tmp.name}")
    job = {"script": "job.py", "strategy": strategy, "chief": "h1", "args": args,
           "notify": {"command": COMMAND, "webhook": receiver.url}, **job_keys}
    fields: dict[str, dict[str, Any]] = {
        h: {"workdir": f"{testbed.host(h).workdir}-notify-{tmp.name}"} for h in ("h1", "h2")}
    fields["h1"]["cpu_workers"] = h1_workers
    inv = testbed.write_inventory(job_dir(tmp) / "cluster.yaml", job, hosts=["h1", "h2"],
                              host_fields=fields, ps={"h1": ps, "h2": ps})
    return inv, workdir


def _variables(path: Path, timeout_s: float) -> dict[str, str]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if path.exists() and path.read_text().strip():
            time.sleep(0.2)  # written whole by then (a few short lines)
            return dict(line.split("=", 1) for line in path.read_text().splitlines())
        time.sleep(0.2)
    raise AssertionError(f"the notify command wrote no {path}")


def test_a_run_that_ends_notifies_with_no_client(testbed, tmp_path: Path, receiver: Receiver,  # type: ignore[no-untyped-def]
                                                 down_after) -> None:
    inv, workdir = _inventory(testbed, tmp_path, receiver, ["--steps", "25"])
    down_after.append(inv)
    up = tfctl(inv, "up")
    assert up.returncode == 0, up.stdout + up.stderr
    run_id = run_id_from(up.stdout)
    assert receiver.received == []  # nothing said while the run runs

    post = receiver.wait_for(run_id, 90)  # the client is gone: the chief host's watcher sent it
    notice = post["json"]
    assert post["path"] == "/hook/tfctl" and post["type"] == "application/json"
    assert notice["reason"] == "finished" and notice["exit_code"] == 0
    assert notice["cause"] == "chief:0 ended" and notice["host"] == "h1"
    assert 4 <= notice["duration_s"] < 90
    assert notice["text"].startswith(f"tfctl run {run_id} (lab) finished, exit 0 after ")

    env = _variables(workdir / f"notified-{run_id}.env", 30)
    assert env["TFCTL_RUN_ID"] == run_id and env["TFCTL_EXIT_CODE"] == "0"
    assert env["TFCTL_REASON"] == "finished" and env["TFCTL_CAUSE"] == "chief:0 ended"
    assert float(env["TFCTL_DURATION_S"]) == notice["duration_s"]
    assert env["TFCTL_HOST"] == "h1" and env["TFCTL_INVENTORY"] == "lab"
    # One word, from one host: h2's watcher (no chief there) sends nothing.
    assert len([p for p in receiver.received if p["json"]["run_id"] == run_id]) == 1
    record = json.loads((workdir / ".tfctl" / "runs" / run_id / "notify.json").read_text())
    assert record["command"]["exit_code"] == 0 and record["webhook"]["status"] == 204


def test_a_run_stopped_by_down_says_so(testbed, tmp_path: Path, receiver: Receiver,  # type: ignore[no-untyped-def]
                                       down_after) -> None:
    inv, workdir = _inventory(testbed, tmp_path, receiver, ["--forever"])
    down_after.append(inv)
    up = tfctl(inv, "up")
    assert up.returncode == 0, up.stdout + up.stderr
    run_id = run_id_from(up.stdout)
    down = tfctl(inv, "down", "--grace", "1")
    assert down.returncode == 0, down.stdout + down.stderr

    notice = receiver.wait_for(run_id, 60)["json"]
    assert notice["reason"] == "stopped" and notice["exit_code"] is None
    assert notice["cause"] == "stopped by `tfctl down`"
    env = _variables(workdir / f"notified-{run_id}.env", 30)
    assert env["TFCTL_REASON"] == "stopped" and env["TFCTL_EXIT_CODE"] == ""
    assert env["TFCTL_CAUSE"] == "stopped by `tfctl down`"


def test_a_webhook_nobody_answers_is_recorded_not_fatal(testbed, tmp_path: Path,  # type: ignore[no-untyped-def]
                                                        receiver: Receiver, down_after) -> None:
    inv, workdir = _inventory(testbed, tmp_path, receiver, ["--steps", "5"])
    text = inv.read_text().replace(receiver.url, f"http://{testbed.gateway or '127.0.0.1'}:9/none")
    inv.write_text(text)
    down_after.append(inv)
    up = tfctl(inv, "up")
    assert up.returncode == 0, up.stdout + up.stderr
    run_id = run_id_from(up.stdout)
    env = _variables(workdir / f"notified-{run_id}.env", 90)  # the command ran all the same
    assert env["TFCTL_REASON"] == "finished"
    record_path = workdir / ".tfctl" / "runs" / run_id / "notify.json"
    deadline = time.monotonic() + 60
    while not record_path.exists() and time.monotonic() < deadline:
        time.sleep(0.5)
    record = json.loads(record_path.read_text())
    assert record["webhook"]["status"] is None and record["webhook"]["tries"] == 3
    assert "refused" in record["webhook"]["error"].lower(), record


def test_a_down_during_the_ends_grace_sends_no_second_word(testbed, tmp_path: Path,  # type: ignore[no-untyped-def]
                                                           receiver: Receiver,
                                                           down_after) -> None:
    # The chief ends; the workers (which train under this strategy) get the end's grace to
    # finish, and `down` stops them within it: the word was said once, at the end. h1 runs a
    # worker beside the chief, so its watcher (the one that sends the word) is still in that
    # grace when `down` stops it.
    inv, _ = _inventory(testbed, tmp_path, receiver, ["--steps", "10"],
                        strategy="multi_worker_mirrored", ps=0, h1_workers=2,
                        task_args={"worker": ["--forever"]})
    down_after.append(inv)
    up = tfctl(inv, "up")
    assert up.returncode == 0, up.stdout + up.stderr
    run_id = run_id_from(up.stdout)
    assert receiver.wait_for(run_id, 90)["json"]["reason"] == "finished"
    down = tfctl(inv, "down", "--grace", "1")
    assert down.returncode == 0, down.stdout + down.stderr
    assert "worker:" in down.stdout  # the workers were still there, in their grace
    time.sleep(5)
    assert [p["json"]["reason"] for p in receiver.received
            if p["json"]["run_id"] == run_id] == ["finished"]
