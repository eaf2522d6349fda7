"""Below the dashboard, what is known and how old it is: who owns a GPU when a host's tasks
cannot be read, how a dropped connection is classified, and what `tfctl status` and `tfctl gpus`
say of a host that does not answer.

The rules: a process on a GPU of a host whose task list could not be read is "owner unknown",
never "foreign" (our tasks being unknown is no evidence the process is a stranger's), and our
tasks as last read still own their GPUs (marked stale); a session or command whose SSH
connection closed under it (another call's timeout closed the link) is `HostUnreachable`, not
"`…/bin/python -S -c BOOT …` exited -1"; the telemetry marks such a host unreachable and asks
again soon. Fakes stand in for the fleet, the SSH channel and the agent's pipe; the real cut link
is tests/testbed/test_ui_cut_heal.py.
"""

from __future__ import annotations

import sys
import threading
import time
from types import SimpleNamespace
from typing import Any

import pytest

from tfctl.inventory.model import Host
from tfctl.remote.connect.session import agentops
from tfctl.remote.connect.ssh import SshTransport
from tfctl.remote.errors import CommandFailed, HostUnreachable
from tfctl.remote.gpus import owners as owners_module
from tfctl.remote.gpus.findings import stream_findings
from tfctl.remote.gpus.lastseen import HostTelemetry
from tfctl.remote.gpus.nvsmi import GpuProcess, GpuSample
from tfctl.remote.gpus.owners import OwnerCache, TaskProcesses, map_owners
from tfctl.remote.gpus.telemetry import TelemetryStreams
from tfctl.remote.runs.status import RunStatus, TaskStatus
from tfctl.tui.cli import output

W = 1795340530.0  # 2026-11-22 09:42:10 UTC
UUIDS = ("GPU-00000000-aaaa-bbbb-cccc-dddddddddddd", "GPU-00000001-aaaa-bbbb-cccc-dddddddddddd")
GPUS = tuple(GpuSample(uuid=u, index=i, name="NVIDIA GeForce GTX 1080 Ti")
             for i, u in enumerate(UUIDS))


# "unreachable since 09:42:10" is local time: the zone is pinned (tests/conftest.py `utc`).
pytestmark = pytest.mark.usefixtures("utc")


def h2_snapshot(at: float | None = 100.0) -> HostTelemetry:
    """h2: our worker:1 (pid 501) on GPU 0, and pid 777 on GPU 1."""
    return HostTelemetry("h2", GPUS, (GpuProcess(UUIDS[0], 501, 1500.0, "python"),
                                      GpuProcess(UUIDS[1], 777, 1500.0, "python")),
                         last_sample_at=at)


# -- the owner rule ------------------------------------------------------------------------------

@pytest.mark.parametrize(("unknown_hosts", "pids", "gpu0", "gpu1"), [
    # tasks read now: a process of none of them is a stranger's
    ((), {"h2": {501: "worker:1"}}, ("task", "worker:1"), ("foreign", "foreign pid 777")),
    # tasks not read now, last read known: ours stay ours, the rest is unknown, not foreign
    (("h2",), {"h2": {501: "worker:1"}}, ("task", "worker:1"),
     ("unknown", "pid 777 (owner unknown)")),
    # tasks never read: nothing can be called foreign
    (("h2",), {}, ("unknown", "pid 501 (owner unknown)"), ("unknown", "pid 777 (owner unknown)")),
])
def test_a_process_is_foreign_only_where_our_tasks_were_read(
        unknown_hosts: tuple[str, ...], pids: dict[str, dict[int, str]],
        gpu0: tuple[str, str], gpu1: tuple[str, str]) -> None:
    owners = map_owners({"h2": h2_snapshot()}, pids, unknown_hosts=unknown_hosts)
    got = [(owners[("h2", u)].kind, owners[("h2", u)].label) for u in UUIDS]
    assert got == [gpu0, gpu1]
    assert all(owners[("h2", u)].stale == bool(unknown_hosts) for u in UUIDS)


def test_the_owner_cache_keeps_the_last_read_of_a_host_that_stops_answering(
        monkeypatch: pytest.MonkeyPatch) -> None:
    reads: list[tuple[tuple[TaskProcesses, ...], dict[str, str]]] = [
        ((TaskProcesses("h2", "worker:1", "running", (501,), "0"),), {}),
        ((), {"h2": "h2: no answer within 2 s to agent status"}),
        ((TaskProcesses("h2", "worker:1", "running", (501,), "0"),), {}),
    ]
    looked_up: list[dict[str, Any]] = []
    monkeypatch.setattr(owners_module, "read_run_hosts",
                        lambda fleet, run_id, hosts: (*reads.pop(0), (), {}))
    def process_users(fleet: object, pids: dict[str, Any]) -> dict[str, dict[int, str]]:
        looked_up.append(dict(pids))
        return {}

    monkeypatch.setattr(owners_module, "process_users", process_users)
    cache = OwnerCache(fleet=None, snapshots=lambda: {"h2": h2_snapshot()})  # type: ignore[arg-type]

    def labels() -> list[str]:
        return [cache.owner_of("h2", u) for u in UUIDS]

    cache.refresh("r1", ["h2"])
    assert labels() == ["worker:1", "foreign pid 777"]
    cache.refresh("r1", ["h2"])  # the link is cut
    assert labels() == ["worker:1", "pid 777 (owner unknown)"]
    assert cache.tasks == ()  # findings see no task of a host that did not answer
    assert looked_up[1] == {}  # and nobody waits on a dead host to name a pid's user
    cache.refresh("r1", ["h2"])  # healed
    assert labels() == ["worker:1", "foreign pid 777"]


# -- a connection that closed under a call --------------------------------------------------------

class DroppedPipe:
    """An agent session whose output ended without an answer or an exit status."""

    booted = False
    reused = False

    def __init__(self, link_lost: bool) -> None:
        self.link_lost = link_lost
        self.alive = True

    def send(self, data: bytes) -> None:
        pass

    def read_line(self, timeout_s: float | None) -> bytes | None:
        return None

    def finish(self, wait_s: float = 5.0) -> tuple[int | None, str]:
        return -1, ""  # paramiko's "no exit status"

    def end_input(self) -> None:
        pass

    def close(self) -> None:
        self.alive = False


class PipeTransport:
    def __init__(self, link_lost: bool) -> None:
        self.host = SimpleNamespace(name="h2", python="/work/main/.venv/bin/python",
                                    workdir="/tmp/w")
        self.options = SimpleNamespace(connect_timeout_s=2.0)
        self.link_lost = link_lost
        self.closed = False

    def open_pipe(self, command: str) -> DroppedPipe:
        return DroppedPipe(self.link_lost)

    def close(self) -> None:
        self.closed = True


def test_an_agent_session_cut_off_by_a_dropped_link_is_unreachable_not_a_command() -> None:
    with pytest.raises(HostUnreachable) as cut:
        agentops.status(PipeTransport(link_lost=True), "/tmp/w", None)  # type: ignore[arg-type]
    assert cut.value.kind == "unreachable" and "-S -c BOOT" not in str(cut.value)
    assert str(cut.value) == "h2: the connection dropped during agent status"
    # The connection still up and no exit status: the agent itself died (a signal) — a failure.
    with pytest.raises(CommandFailed) as died:
        agentops.status(PipeTransport(link_lost=False), "/tmp/w", None)  # type: ignore[arg-type]
    assert "exited -1" in str(died.value)


class ClosedLink:
    """A host's link whose command came back with no exit status (Fabric's `exited` -1)."""

    def __init__(self, active: bool) -> None:
        self.is_connected = active

    def run(self, command: str, stdin: str | None, timeout_s: float | None) -> Any:
        return SimpleNamespace(exited=-1, stdout="", stderr="")


def _ssh(active: bool) -> SshTransport:
    host = Host(name="h2", address="10.0.0.2", user=None, port=None, identity_file=None,
                known_hosts="/dev/null", jump=None, workdir="/tmp/w", python=sys.executable,
                env={}, gpus=(0,), ps=0)
    transport = SshTransport(host)
    transport.connection = lambda: ClosedLink(active)  # type: ignore[method-assign,assignment,return-value]
    return transport


def test_a_command_whose_connection_closed_under_it_is_unreachable() -> None:
    with pytest.raises(HostUnreachable, match="dropped mid-command"):
        _ssh(active=False).run("nvidia-smi --query-compute-apps=pid --format=csv")
    assert _ssh(active=True).run("true").exit_code == -1  # connection up: the command's own


# -- the telemetry ------------------------------------------------------------------------------

class DeadFleet:
    """Every connect attempt times out at once."""

    def __init__(self) -> None:
        self.attempts = 0
        self.lock = threading.Lock()

    def transport(self, host: str) -> Any:
        with self.lock:
            self.attempts += 1
        raise HostUnreachable(host, "10.0.0.2:22 unreachable: no answer within 2 s")


def test_the_telemetry_marks_a_silent_host_unreachable_and_asks_again_soon() -> None:
    fleet = DeadFleet()
    tel = TelemetryStreams(fleet, hosts=["h2"], backoff_s=5.0, unreachable_retry_s=0.05)  # type: ignore[arg-type]
    started = tel.clock()
    tel.start()
    try:
        deadline = time.monotonic() + 5.0
        while fleet.attempts < 4 and time.monotonic() < deadline:
            time.sleep(0.02)
        snap = tel.snapshot("h2")
    finally:
        tel.stop()
    assert fleet.attempts >= 4  # not 5 s, 10 s, 20 s apart: a healed link is seen soon
    assert snap.error_type is HostUnreachable and snap.unreachable
    since = snap.unreachable_since()
    assert since is not None and started <= since <= started + 1.0  # the first attempt's


def test_unreachable_since_is_the_start_of_the_run_of_errors() -> None:
    ok = h2_snapshot(at=100.0)
    quiet = ok.with_error("no output from nvidia-smi for 5 s", None, 100.0)
    cut = quiet.with_error("10.0.0.2:22 unreachable: no answer within 2 s", HostUnreachable, 108.0)
    assert (quiet.unreachable_since(), cut.unreachable_since()) == (None, 100.0)
    assert cut.gpus == ok.gpus  # the last known values stay, to be shown as stale
    assert cut.reach_words(135.0, W + 35) == "unreachable since 09:42:10 (no answer for 35 s)"
    assert cut.reach_json(135.0, W + 35)["unreachable_since"] == "2026-11-22T09:42:10+00:00"
    assert ok.reach_json(135.0, W + 35)["reachable"] is True


def test_the_telemetry_finding_names_the_silence_not_the_command() -> None:
    cut = h2_snapshot(100.0).with_error("no answer within 10 s to `sh -c 'command -v nvidia-s",
                                        HostUnreachable, 100.0)
    (found,) = stream_findings({"h2": cut}, 135.0)
    assert (found.level, found.kind) == ("error", "stream_unreachable")
    assert found.text == ("h2 unreachable (no answer for 35 s): its GPUs and tasks are shown as "
                          "last seen")


# -- tfctl status and tfctl gpus ------------------------------------------------------------------

def _cut_status() -> RunStatus:
    tasks = (TaskStatus("worker:0", "h1", "running", pid=10, uptime_s=5.0),)
    return RunStatus("r1", tasks, {"h2": "h2: no answer within 2 s to agent status"},
                     asked_at_s=W)


def test_status_says_since_when_and_for_how_long_in_words_and_json() -> None:
    st = _cut_status()
    assert st.reach_words("h2", W + 2) == "unreachable since 09:42:10 (no answer for 2 s)"
    assert st.reach_words("h1", W + 2) is None
    assert st.reach(["h1", "h2"], W + 2) == {
        "h1": {"reachable": True, "unreachable_since": None, "no_answer_s": None},
        "h2": {"reachable": False, "unreachable_since": "2026-11-22T09:42:10+00:00",
               "no_answer_s": 2, "why": "h2: no answer within 2 s to agent status"}}


def test_status_table_prints_the_unreachable_line(monkeypatch: pytest.MonkeyPatch,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(output, "time", SimpleNamespace(time=lambda: W + 2))
    output.status_table(_cut_status())
    said = capsys.readouterr().out
    assert "h2 unreachable since 09:42:10 (no answer for 2 s): its tasks are unknown" in said


def test_gpus_json_and_table_say_unreachable_since(monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(output, "time", SimpleNamespace(time=lambda: W + 35))
    cut = h2_snapshot(100.0).with_error("10.0.0.2:22 unreachable: no answer within 2 s",
                                        HostUnreachable, 100.0)
    snaps = {"h1": HostTelemetry("h1", GPUS[:1], last_sample_at=134.5), "h2": cut}
    owners = map_owners(snaps, {"h1": {}, "h2": {501: "worker:1"}}, unknown_hosts=("h2",))
    rows = output.gpu_objects(snaps, owners, 135.0)
    reach = [(r["host"], r["reachable"], r["unreachable_since"], r["owner_kind"]) for r in rows]
    assert reach == [("h1", True, None, "idle"),
                     ("h2", False, "2026-11-22T09:42:10+00:00", "task"),
                     ("h2", False, "2026-11-22T09:42:10+00:00", "unknown")]
    output.print_renderable(output.gpu_table(snaps, owners, (), 135.0, "r1"))
    shown = capsys.readouterr().out
    assert "unreachable since 09:42:10 (no answer for 35 s)" in shown
    assert "foreign" not in shown
