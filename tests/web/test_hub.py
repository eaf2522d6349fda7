"""The dashboard's hub (tui/web/hub.py), without a browser: what crosses its socket
(hubwire.py), its shared reads and log feed (hubreads.py), and a hub over a `transport: local`
inventory read by two tabs' sources (hubsources.py) as their dashboards poll it: the hosts are
read once, whatever the number of tabs."""

from __future__ import annotations

import os
import pickle
import stat
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.localcluster import local_cluster
from tfctl.inventory.load import load_inventory
from tfctl.remote.connect.transport import SshOptions
from tfctl.remote.controller import RunController
from tfctl.remote.errors import GpusBusy, HostUnreachable, RemoteError
from tfctl.remote.gpus.lastseen import GpuHistory, HostTelemetry
from tfctl.remote.gpus.nvsmi import GpuSample
from tfctl.remote.runs.logs import LogBatch
from tfctl.tui.web import hubcalls, hubwire
from tfctl.tui.web.hub import DashboardHub, HubBusy
from tfctl.tui.web.hubreads import LogFeed, SharedReads, TelemetryNews, samples_since
from tfctl.tui.web.hubsources import HubSources, HubTelemetry, connect


class ForeignError(Exception):
    """An error class a viewer may not have imported (as paramiko's)."""


def crossed(value: object) -> object:
    return hubwire.loads(hubwire.dumps(value))


def test_errors_cross_as_their_own_class_with_their_fields() -> None:
    unreachable = crossed(HostUnreachable("h1", "no answer in 10 s", "tail"))
    assert type(unreachable) is HostUnreachable
    assert isinstance(unreachable, RemoteError)
    assert (unreachable.host, unreachable.what, unreachable.kind) == ("h1", "no answer in 10 s",
                                                                      "unreachable")
    assert unreachable.full() == "h1: no answer in 10 s\n    tail"
    busy = crossed(GpusBusy(("h2: GPU 0: pid 7 (user bob)",), "h2: 1"))
    assert type(busy) is GpusBusy and busy.holders == ("h2: GPU 0: pid 7 (user bob)",)
    assert busy.free == "h2: 1"
    assert type(crossed(LookupError("no run"))) is LookupError


def test_an_error_of_another_library_crosses_as_its_nearest_known_class() -> None:
    error = crossed(ForeignError("the link broke"))
    assert type(error) is Exception and str(error) == "ForeignError: the link broke"
    telemetry = crossed(HostTelemetry("h1", error="gone", error_type=ForeignError))
    assert isinstance(telemetry, HostTelemetry) and telemetry.error_type is Exception
    assert crossed(HostTelemetry("h1", error_type=HostUnreachable)).unreachable is False


def test_nothing_but_records_and_errors_is_read() -> None:
    class Call:
        def __reduce__(self) -> tuple[object, tuple[str]]:
            return os.system, ("true",)

    with pytest.raises(pickle.UnpicklingError, match=r"posix\.system"):
        hubwire.loads(pickle.dumps(Call()))
    with pytest.raises(pickle.UnpicklingError, match=r"subprocess\.Popen"):
        import subprocess
        hubwire.loads(pickle.dumps(subprocess.Popen))


def test_shared_reads_read_once_for_everyone_asking_together() -> None:
    reads = SharedReads()
    calls: list[int] = []
    started = threading.Event()

    def slow() -> int:
        calls.append(1)
        started.set()
        time.sleep(0.3)
        return len(calls)

    answers: list[int] = []
    first = threading.Thread(target=lambda: answers.append(reads.latest("k", slow)))
    first.start()
    started.wait(5)
    answers.append(reads.latest("k", slow))  # waits for the read under way
    first.join()
    assert answers == [1, 1] and len(calls) == 1
    assert reads.latest("k", slow) == 1  # kept, whatever its age
    assert reads.fresh("k", 0.0, slow) == 2  # too old for this one
    reads.clear()  # after an action: read again
    assert reads.peek("k") is None
    assert reads.latest("k", slow) == 3


def test_a_failed_read_is_said_to_every_tab() -> None:
    reads = SharedReads()

    def fails() -> None:
        raise HostUnreachable("h1", "no answer")

    reads.refresh("h1", fails)
    for _ in range(2):
        with pytest.raises(HostUnreachable):
            reads.latest("h1", lambda: pytest.fail("read again"))
    assert isinstance(reads.failed("h1"), HostUnreachable) and reads.peek("h1") is None


class Follower:
    """A log follower that hands out the batches it was given, one per poll."""

    def __init__(self, *batches: list[tuple[str, str]]) -> None:
        self.batches = list(batches)
        self.hosts: list[str] = []
        self.tails: list[int | None] = []

    def poll(self, tail_lines: int | None = None) -> LogBatch:
        self.tails.append(tail_lines)
        return LogBatch(self.batches.pop(0), {"h3": "no answer"})


def test_the_log_feed_gives_each_tab_the_lines_it_has_not_had() -> None:
    follower = Follower([("w:0", "a"), ("w:0", "b")], [("w:1", "c")], [("w:0", "d")])
    feed = LogFeed(follower, keep=3)  # type: ignore[arg-type]
    feed.poll(["h1", "h2"])
    first = feed.since(None)
    assert first.lines == [("w:0", "a"), ("w:0", "b")] and first.errors == {"h3": "no answer"}
    feed.poll(["h1"])
    assert follower.hosts == ["h1"] and follower.tails[0] == 200 and follower.tails[1] is None
    assert feed.since(first.cursor).lines == [("w:1", "c")]
    feed.poll(["h1"])
    assert feed.since(None).lines == [("w:0", "b"), ("w:1", "c"), ("w:0", "d")]  # 3 kept


class TelemetryAnswers:
    """The hub's answer to `telemetry` over a history the test fills (a client of
    `HubTelemetry`)."""

    def __init__(self) -> None:
        self.history = GpuHistory()
        self.asked: list[float | None] = []

    def call(self, call: object, since_s: float | None) -> TelemetryNews:
        self.asked.append(since_s)
        return TelemetryNews({"h1": HostTelemetry("h1", last_sample_at=9.0)},
                             {("h1", "GPU-a"): "worker:0"},
                             samples_since(self.history, since_s))


def test_a_tab_keeps_every_gpu_sample_once() -> None:
    hub = TelemetryAnswers()
    for at in (1.0, 2.0):
        hub.history.record("h1", [GpuSample("GPU-a", 0, utilization_gpu_pct=at),
                                   GpuSample("GPU-b", 1, utilization_gpu_pct=at)], at)
    tab = HubTelemetry(hub, 0.5)  # type: ignore[arg-type]
    tab.fetch()
    hub.history.record("h1", [GpuSample("GPU-a", 0, utilization_gpu_pct=3.0)], 3.0)
    tab.fetch()
    tab.fetch()
    assert hub.asked == [None, 2.0, 3.0]  # from the newest sample it has (others may share it)
    assert tab.history.series("h1", "GPU-a", "utilization_gpu_pct") == (1.0, 2.0, 3.0)
    assert tab.history.series("h1", "GPU-b", "utilization_gpu_pct") == (1.0, 2.0)
    assert tab.snapshot("h1").last_sample_at == 9.0 and tab.snapshot("h2").host == "h2"
    assert tab.owner_of("h1", "GPU-a") == "worker:0" and tab.owner_of("h1", "GPU-b") == "unknown"


@pytest.fixture
def tabs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
         ) -> Iterator[tuple[DashboardHub, HubSources, HubSources, dict[str, int]]]:
    """A hub over a local inventory (slow polls: what the test counts is the tabs'), two tabs'
    sources, and how often the hub's controller read the hosts, by method (the run: looked
    for afresh, as the tabs ask every RUN_RECHECK_S)."""
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path / "rt"))
    counted: dict[str, int] = {}
    for name in ("current", "host_status", "lab"):
        real = getattr(RunController, name)

        def counting(self: RunController, *args: object, _n: str = name, _r: object = real,
                     **kwargs: object) -> object:
            if _n != "current" or kwargs.get("refresh"):  # what asks the hosts for the run
                counted[_n] = counted.get(_n, 0) + 1
            return _r(self, *args, **kwargs)  # type: ignore[operator]

        monkeypatch.setattr(RunController, name, counting)
    inv = load_inventory(local_cluster(tmp_path, {"a": {"gpus": 0}}))
    hub = DashboardHub(inv, SshOptions(persist_s=0.0), task_refresh_s=60.0, run_recheck_s=60.0)
    path = hub.listen()
    try:
        yield hub, connect(path, 1.0), connect(path, 1.0), counted
    finally:
        hub.close()
    assert not path.exists()


def test_the_socket_is_the_users_alone(
        tabs: tuple[DashboardHub, HubSources, HubSources, dict[str, int]]) -> None:
    hub, *_ = tabs
    assert hub.path is not None
    assert stat.S_IMODE(hub.path.stat().st_mode) == 0o600
    assert stat.S_IMODE(hub.path.parent.stat().st_mode) == 0o700


def test_two_tabs_polling_read_the_hosts_once(
        tabs: tuple[DashboardHub, HubSources, HubSources, dict[str, int]]) -> None:
    _, first, second, counted = tabs
    assert first.control.inventory.name == second.control.inventory.name == "loc"
    for _ in range(5):
        for tab in (first, second):
            assert tab.control.current(refresh=True) is None
            assert tab.control.host_status("a") == ()
            assert tab.control.findings() == []
    assert counted["current"] == 1 and counted["host_status"] == 1, counted
    for tab in (first, second):
        (row,) = tab.control.lab()[0].rows  # asked for together: one read for both
        assert row.state == "cpu" and row.error is None  # the lab's answer: no GPUs there
    assert counted["lab"] == 1, counted
    first.telemetry.fetch()
    assert first.telemetry.snapshot("a").host == "a"
    assert first.telemetry.owner_of("a", "GPU-none") == "unknown"


def test_one_action_at_a_time_for_every_tab(
        tabs: tuple[DashboardHub, HubSources, HubSources, dict[str, int]],
        monkeypatch: pytest.MonkeyPatch) -> None:
    _, first, second, _ = tabs
    going, release = threading.Event(), threading.Event()

    def slow_sync(self: RunController) -> dict[str, object]:
        going.set()
        release.wait(10)
        return {}

    monkeypatch.setattr(RunController, "sync", slow_sync)
    done: list[object] = []
    syncing = threading.Thread(target=lambda: done.append(first.control.sync()))
    syncing.start()
    assert going.wait(10)
    with pytest.raises(HubBusy, match="another tab's “sync” is under way"):
        second.control.down(1.0)
    release.set()
    syncing.join(10)
    assert done == [{}]


def test_every_call_of_a_tab_is_declared_once_and_answered_by_the_hub(tmp_path: Path) -> None:
    """The dashboard's `RunControl` over the hub: each member is a call of the table (or the
    tab's own), each call has one name, and the hub answers each, and only those."""
    from tfctl.tui.app.sources import RunControl

    members = {name for name, value in vars(RunControl).items()
               if callable(value) and not name.startswith("_")}
    names = [call.name for call in hubcalls.CALLS]
    hub = DashboardHub(load_inventory(local_cluster(tmp_path, {"a": {"gpus": 0}})),
                       SshOptions(persist_s=0.0))

    assert set(hubcalls.RUN_CONTROL) == members
    assert {c for c in hubcalls.RUN_CONTROL.values() if c is not None} <= set(hubcalls.CALLS)
    assert len(set(names)) == len(names) and set(hub.answers) == set(names)
    assert all(callable(hub.answers[name]) for name in names)
