"""The telemetry streams on `transport: local` hosts, reading the nvidia-smi stand-in as programs.

Every test puts the stand-in (tests/support/fakes, a test double of the nvidia-smi CLI) first on
PATH and tags itself with a unique TFCTL_TEST_NVSMI_TAG, so only the processes it starts count as
GPU users.
The parser's truth is tested on real captures in test_nvsmi.py; here the streaming, probing,
reconnecting and the `tfctl gpus` command are tested against real processes.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.fakes import NVIDIA_SMI_STANDIN, install_nvidia_smi_standin
from tests.support.leftovers import kill_started
from tests.support.procs import parent_of
from tests.support.testbed import Testbed
from tests.support.testbedtools import FOREVER, wait_until
from tfctl.inventory.load import load_inventory
from tfctl.inventory.model import Host, Inventory, Job
from tfctl.remote.connect.fleet import Fleet
from tfctl.remote.gpus.lastseen import TelemetryState
from tfctl.remote.gpus.nvsmi import BASE_GPU_FIELDS, WANTED_GPU_FIELDS, GpuSample
from tfctl.remote.gpus.telemetry import BlockAssembler, TelemetryStreams, parse_probe
from tfctl.tui.app.sources import TelemetrySource
from tfctl.tui.cli.demo_lab import free_port_block

pytestmark = pytest.mark.timeout(120)

CAPTURES = Path(__file__).parents[1] / "support" / "data" / "nvidia-smi"
HERE = Path(__file__).parents[1] / "support"
GPUS = {"gpus": [{"name": "NVIDIA TITAN X (Pascal)", "memory_total_mib": 12288},
                 {"name": "NVIDIA GeForce GTX 970", "memory_total_mib": 4096, "power": None}]}


class Bench:
    """One local host whose PATH starts with a bin dir holding `nvidia-smi` (or not)."""

    def __init__(self, tmp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        self.tmp = tmp
        self.bin = tmp / "bin"
        self.tag = uuid.uuid4().hex
        self.children: list[subprocess.Popen[bytes]] = []
        self.monkeypatch = monkeypatch
        config = tmp / "gpus.json"
        config.write_text(json.dumps({"host": f"bench-{self.tag}", **GPUS}))
        for name in list(os.environ):
            if name.startswith(("CUDA_", "TFCTL_TEST_")):
                monkeypatch.delenv(name)
        monkeypatch.setenv("PATH", f"{self.bin}:{os.environ['PATH']}")
        monkeypatch.setenv("TFCTL_TEST_NVSMI_TAG", self.tag)
        monkeypatch.setenv("TFCTL_TEST_NVSMI_CONFIG", str(config))
        install_nvidia_smi_standin(self.bin)

    def host(self, name: str = "bench") -> Host:
        return Host(name=name, address="127.0.0.1", user=None, port=None, identity_file=None,
                    known_hosts=str(self.tmp / "known_hosts"), jump=None,
                    workdir=str(self.tmp / "work"), python=sys.executable, env={},
                    gpus=(0, 1), ps=0, transport="local")

    def tel(self, **kw: Any) -> TelemetryStreams:
        fleet = Fleet(Inventory("bench", (self.host(),), Job(script="job.py")))
        kw.setdefault("interval_ms", 200)
        kw.setdefault("apps_every", 1)
        kw.setdefault("backoff_s", 0.2)
        return TelemetryStreams(fleet, **kw)

    def start(self, *argv: str, **env: str) -> subprocess.Popen[bytes]:
        child = subprocess.Popen(list(argv), env={**os.environ, **env})
        self.children.append(child)
        return child

    def tool(self, script: str) -> None:
        """Replace `nvidia-smi` on the PATH with a shell wrapper around the stand-in."""
        link = self.bin / "nvidia-smi"
        link.unlink()
        link.write_text(f"#!/bin/sh\nSTANDIN='{sys.executable} {NVIDIA_SMI_STANDIN}'\n{script}")
        link.chmod(0o755)

    def stream_pids(self) -> list[int]:
        """Live stand-in processes in loop mode that carry this bench's tag."""
        found = []
        for entry in os.listdir("/proc"):
            try:
                cmd = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
                env = Path(f"/proc/{entry}/environ").read_bytes()
            except OSError:
                continue
            if b"-lms" in cmd and f"TFCTL_TEST_NVSMI_TAG={self.tag}".encode() in env:
                found.append(int(entry))
        return found

    def close(self) -> None:
        kill_started(self.children)


@pytest.fixture
def bench(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Bench]:
    b = Bench(tmp_path, monkeypatch)
    yield b
    b.close()


@pytest.fixture
def running(bench: Bench) -> Iterator[Callable[..., TelemetryStreams]]:
    tels: list[TelemetryStreams] = []

    def make(**kw: Any) -> TelemetryStreams:
        tel = bench.tel(**kw)
        tels.append(tel)
        tel.start()
        return tel

    yield make
    for tel in tels:
        tel.stop()


def as_source(tel: TelemetryStreams) -> TelemetrySource:
    """mypy checks here that the streams satisfy the dashboard's Protocol."""
    return tel


def ok_state(tel: TelemetryStreams) -> bool:
    return tel.snapshot("bench").state(tel.clock()) is TelemetryState.OK


# -- pure parts -------------------------------------------------------------------------------

def capture_sections(path: Path) -> dict[str, str]:
    sections: dict[str, list[str]] = {}
    current = ""
    for line in path.read_text(errors="replace").splitlines():
        if line.startswith("# $ "):
            current = line[4:].strip()
            sections[current] = []
        elif current:
            sections[current].append(line)
    return {k: "\n".join(v) for k, v in sections.items()}


@pytest.mark.parametrize("capture", sorted(p.name for p in CAPTURES.glob("*.txt")))
def test_probe_on_real_help_texts_keeps_only_listed_fields(capture: str) -> None:
    sections = capture_sections(CAPTURES / capture)
    gpu_help = next(v for k, v in sections.items() if k.endswith("--help-query-gpu"))
    apps_help = next((v for k, v in sections.items()
                      if k.endswith("--help-query-compute-apps")), "")
    probe = parse_probe(f"{gpu_help}\n@@tfctl-telemetry:apps\n{apps_help}\n"
                        "@@tfctl-telemetry:gpus\nGPU-5f2e1e2c-0000-1111-2222-333344445555\n")
    listed = set(re.findall(r'"([\w.]+)"', gpu_help))
    assert set(probe.gpu_fields) <= listed
    assert {"uuid", "utilization.gpu", "memory.used"} <= set(probe.gpu_fields)
    wanted = [names for names in WANTED_GPU_FIELDS if any(n in listed for n in names)]
    assert len(probe.gpu_fields) == len(wanted)
    assert probe.uuids == ("GPU-5f2e1e2c-0000-1111-2222-333344445555",)
    assert (probe.no_gpus, probe.error) == (None, None)


def test_probe_outcomes() -> None:
    assert parse_probe("@@tfctl-telemetry:none\n").no_gpus
    nodev = parse_probe("\n@@tfctl-telemetry:apps\n\n@@tfctl-telemetry:gpus\n"
                        "No devices were found\n")
    assert nodev.no_gpus and nodev.error is None
    broken = parse_probe("@@tfctl-telemetry:gpus\n"
                         "Failed to initialize NVML: Driver/library version mismatch\n")
    assert broken.error and "NVML" in broken.error and broken.no_gpus is None
    assert broken.gpu_fields == BASE_GPU_FIELDS  # no help text: the fields every driver knows


def test_blocks_end_when_every_gpu_reported_or_one_repeats() -> None:
    a, b, c = (GpuSample(uuid=f"GPU-{i}", index=i) for i in range(3))
    known = BlockAssembler(["GPU-0", "GPU-1"])
    assert known.add(b) == [] and known.add(a) == [(a, b)]  # sorted by index, no waiting
    unknown = BlockAssembler()
    assert unknown.add(a) == [] and unknown.add(b) == [] and unknown.add(a) == [(a, b)]
    assert unknown.add(b) == [(a, b)]  # now the set is known
    assert unknown.add(c) == [] and unknown.add(a) == []  # a GPU appeared: the block grows
    assert unknown.add(b) == [(a, b, c)]
    assert unknown.add(a) == [] and unknown.add(b) == [] and unknown.add(c) == [(a, b, c)]


# -- the streams on real processes ------------------------------------------------------------

def test_stream_shows_gpus_and_the_process_using_each(bench: Bench, running: Any) -> None:
    worker = bench.start("sleep", "120", CUDA_VISIBLE_DEVICES="1")
    tel = running()
    snap = wait_until("processes", lambda: (s := tel.snapshot("bench")).processes and s, 30, 0.05)
    gpus = {g.index: g for g in snap.gpus}
    assert [gpus[0].name, gpus[1].name] == ["NVIDIA TITAN X (Pascal)", "NVIDIA GeForce GTX 970"]
    assert gpus[0].utilization_gpu_pct == 0.0
    assert (gpus[1].utilization_gpu_pct or 0) >= 90.0
    assert (gpus[1].power_draw_w, gpus[0].power_limit_w) == (None, 250.0)  # never 0 W
    assert [(p.gpu_uuid, p.pid) for p in snap.processes] == [(gpus[1].uuid, worker.pid)]
    assert snap.state(tel.clock()) is TelemetryState.OK
    wait_until("history", lambda: len(tel.history.recent("bench", gpus[1].uuid)) >= 3, 30, 0.05)
    assert all(u is not None and u >= 90 for u in tel.history.series(
        "bench", gpus[1].uuid, "utilization_gpu_pct"))
    assert tel.info("bench").gpu_fields[-1] == "clocks_event_reasons.active"
    worker.kill()
    worker.wait()
    wait_until("the process to go", lambda: not tel.snapshot("bench").processes, 30, 0.05)


def test_only_fields_the_driver_lists_are_queried(bench: Bench, running: Any) -> None:
    # An older driver: no clocks_event_reasons; asking for it fails the whole query.
    bench.tool('case "$*" in\n'
               '  *--help-query-gpu*) $STANDIN "$@" | grep -v clocks_ ;;\n'
               '  *clocks_*) echo \'Field "clocks_event_reasons.active" is not a valid field '
               "to query.'; exit 2 ;;\n"
               '  *) exec $STANDIN "$@" ;;\n'
               "esac\n")
    tel = running()
    wait_until("samples", lambda: ok_state(tel), 30, 0.05)
    assert "clocks_event_reasons.active" not in tel.info("bench").gpu_fields
    assert all(g.throttle_reasons is None for g in tel.snapshot("bench").gpus)
    assert tel.info("bench").restarts == 0


def test_host_without_nvidia_smi_says_no_gpus_once(bench: Bench, running: Any,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    if shutil.which("nvidia-smi"):
        pytest.skip("this machine has a real nvidia-smi")
    tel = running()
    wait_until("no GPUs",
               lambda: tel.snapshot("bench").state(tel.clock()) is TelemetryState.NO_GPUS, 30, 0.05)
    time.sleep(1.0)  # many ticks at 200 ms: still one calm state, no error
    snap = tel.snapshot("bench")
    assert snap.state(tel.clock()) is TelemetryState.NO_GPUS and snap.error is None
    assert (tel.info("bench").restarts, tel.info("bench").blocks) == (0, 0)


def test_no_devices_is_no_gpus(bench: Bench, running: Any,
                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TFCTL_TEST_NVSMI_CONFIG")  # the stand-in: "No devices were found"
    tel = running()
    wait_until("no GPUs",
               lambda: tel.snapshot("bench").state(tel.clock()) is TelemetryState.NO_GPUS, 30, 0.05)
    assert tel.info("bench").restarts == 0


def test_nvml_failure_is_a_host_error_then_recovers(bench: Bench, running: Any,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TFCTL_TEST_NVSMI_FAIL",
                       "Failed to initialize NVML: Driver/library version mismatch")
    tel = running()
    snap = wait_until("an error", lambda: (s := tel.snapshot("bench")).error and s, 30, 0.05)
    assert "Driver/library version mismatch" in (snap.error or "")
    assert snap.state(tel.clock()) is TelemetryState.ERROR
    monkeypatch.delenv("TFCTL_TEST_NVSMI_FAIL")  # "the driver was fixed": the retry succeeds
    wait_until("recovery", lambda: ok_state(tel), 30, 0.05)
    assert tel.snapshot("bench").error is None


def test_killed_stream_marks_the_host_then_reconnects(bench: Bench, running: Any) -> None:
    tel = running(backoff_s=1.0)
    wait_until("samples", lambda: ok_state(tel), 30, 0.05)
    first = wait_until("the stream process", bench.stream_pids, 30, 0.05)
    assert len(first) == 1
    os.kill(first[0], signal.SIGKILL)
    snap = wait_until("the error", lambda: (s := tel.snapshot("bench")).error and s, 30, 0.05)
    assert snap.gpus, "the last known GPUs are kept (dimmed by a UI)"
    assert tel.info("bench").restarts == 1
    assert "stream ended" in (tel.info("bench").last_error or "")
    blocks = tel.info("bench").blocks
    wait_until("recovery", lambda: ok_state(tel) and tel.info("bench").blocks > blocks, 30, 0.05)
    assert bench.stream_pids() not in ([], first)


def test_silent_stream_is_closed_and_reopened(bench: Bench, running: Any) -> None:
    # One block, then silence with the process alive: as when the link is cut.
    bench.tool('case "$*" in\n'
               '  *-lms*) $STANDIN $(echo "$@" | sed "s/-lms [0-9]*//"); exec sleep 600 ;;\n'
               '  *) exec $STANDIN "$@" ;;\n'
               "esac\n")
    tel = running(silence_s=1.0)
    wait_until("the watchdog", lambda: tel.info("bench").restarts >= 1, 30, 0.05)
    assert "no output from nvidia-smi" in (tel.info("bench").last_error or "")
    assert tel.info("bench").blocks >= 1


def test_stop_leaves_no_stream_running(bench: Bench) -> None:
    tel = bench.tel()
    as_source(tel).start()
    wait_until("samples", lambda: ok_state(tel), 30, 0.05)
    assert bench.stream_pids()
    tel.stop()
    wait_until("the stream to end", lambda: not bench.stream_pids(), 10, 0.05)
    assert not any(t.is_alive() for t in tel._threads)


# -- `tfctl gpus` end to end on a local run ------------------------------------------------------

def tfctl(inv: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tfctl.tui", "-i", str(inv), *args],
                          capture_output=True, text=True, timeout=timeout, cwd=inv.parent)


def test_tfctl_gpus_json_shows_each_worker_on_its_gpu_and_foreign(bench: Bench) -> None:
    job = bench.tmp / "job"
    job.mkdir()
    shutil.copy(HERE / "lightjob.py", job / "job.py")
    # Above the demo's range (22220+), so the two never pick the same block.
    ps_port = free_port_block(1, start=41000, stop=60000)
    worker_port = free_port_block(2, start=ps_port + 1, stop=60000)
    inv = job / "cluster.yaml"
    inv.write_text(yaml.safe_dump({
        "name": "bench",
        "hosts": [{"name": "bench", "address": "127.0.0.1", "transport": "local", "gpus": 2,
                   "ps": 1, "workdir": str(bench.tmp / "work"), "python": sys.executable}],
        "job": {"script": "job.py", "args": ["--forever"],
                "ports": {"ps": ps_port, "worker": worker_port}},
    }))
    up = tfctl(inv, "up")
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        stranger = bench.start("sleep", "120", CUDA_VISIBLE_DEVICES="0")
        shown = tfctl(inv, "gpus", "--json")
        assert shown.returncode == 0, shown.stderr
        rows = {r["index"]: r for r in json.loads(shown.stdout)}
        assert set(rows) == {0, 1}
        for index in (0, 1):
            row = rows[index]
            assert row["host"] == "bench" and row["state"] == "ok"
            assert row["utilization_gpu_pct"] >= 90
            assert row["tasks"] == [f"worker:{index}"] and row["planned"] == [f"worker:{index}"]
        assert rows[1]["owner"] == "worker:1" and rows[1]["owner_kind"] == "task"
        assert rows[0]["owner_kind"] == "shared"
        assert [f["pid"] for f in rows[0]["foreign"]] == [stranger.pid]
        table = tfctl(inv, "gpus")
        assert table.returncode == 0, table.stderr
        assert "worker:1" in table.stdout and f"foreign pid {stranger.pid}" in table.stdout
    finally:
        down = tfctl(inv, "down", "--grace", "1")
    assert down.returncode == 0, down.stdout + down.stderr


def test_tfctl_gpus_is_headless(bench: Bench) -> None:
    inv = bench.tmp / "cluster.yaml"
    inv.write_text(yaml.safe_dump({
        "name": "bench", "job": {"script": "job.py"},
        "hosts": [{"name": "bench", "address": "127.0.0.1", "transport": "local", "gpus": 2,
                   "workdir": str(bench.tmp / "work"), "python": sys.executable}]}))
    code = ("import sys\nfrom tfctl.tui.cli.main import main\n"
            f"main(['-i', {str(inv)!r}, 'gpus', '--json'], standalone_mode=False)\n"
            "print(sorted(m for m in ('textual', 'tensorflow') if m in sys.modules))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, cwd=bench.tmp)
    assert proc.returncode == 0, proc.stderr
    *listing, loaded = proc.stdout.strip().splitlines()
    assert loaded == "[]"
    assert [r["index"] for r in json.loads("\n".join(listing))] == [0, 1]


# -- on the SSH lab: real sshd hosts, the stand-in on their PATH ----------------------------------



def lab_inventory(testbed: Testbed, tmp: Path) -> Path:
    job = tmp / "job"
    job.mkdir(exist_ok=True)
    shutil.copy(HERE / "lightjob.py", job / "job.py")
    return testbed.write_inventory(
        job / "cluster.yaml",
        FOREVER,
        gpus={"h1": 2, "h2": [0], "h3": 0},
        ps={"h1": 1, "h2": 0, "h3": 0},
    )


def stream_on(testbed: Testbed, host: str) -> int | None:
    """The pid of the telemetry loop an SSH session runs on a lab host: not a run watcher's own
    stream, nor an earlier command's loop that outlived its session (until its next write finds
    the pipe closed, up to one interval later)."""
    for pid in testbed.pids_in(host):
        try:
            if b"-lms" in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0") and \
                    Path(f"/proc/{parent_of(pid)}/comm").read_text().strip() == "sshd":
                return pid
        except OSError:
            continue
    return None


@pytest.mark.testbed
def test_lab_gpus_json_owners_during_a_run(gpu_testbed: Testbed, tmp_path: Path,
                                           stranger: Callable[..., int]) -> None:
    inv = lab_inventory(gpu_testbed, tmp_path)
    up = tfctl(inv, "up", timeout=240)
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        holder = stranger("h2", 1)
        status = json.loads(tfctl(inv, "status", "--json").stdout)
        workers = [t for t in status["tasks"] if t["name"].startswith("worker:") and t["mask"]]
        assert len(workers) == 3  # h3's worker is CPU-only
        shown = tfctl(inv, "gpus", "--json")
        assert shown.returncode == 0, shown.stdout + shown.stderr
        rows = {(r["host"], r["index"]): r for r in json.loads(shown.stdout)}
        for worker in workers:
            row = rows[(worker["host"], int(worker["mask"]))]
            assert row["state"] == "ok" and row["utilization_gpu_pct"] >= 90, row
            assert (row["owner"], row["owner_kind"]) == (worker["name"], "task"), row
        foreign = rows[("h2", 1)]
        assert foreign["owner_kind"] == "foreign"
        assert [(f["pid"], f["user"]) for f in foreign["foreign"]] == [(holder, gpu_testbed.user)]
        assert (rows[("h3", None)]["state"], rows[("h3", None)]["uuid"]) == ("no_gpus", None)
    finally:
        tfctl(inv, "down", "--grace", "1")


@pytest.mark.testbed
def test_lab_killed_ssh_channel_marks_host_then_recovers(gpu_testbed: Testbed,
                                                         tmp_path: Path) -> None:
    fleet = Fleet(load_inventory(lab_inventory(gpu_testbed, tmp_path)))
    tel = TelemetryStreams(fleet, interval_ms=300, backoff_s=1.0)
    tel.start()
    try:
        def ok(host: str) -> bool:
            return tel.snapshot(host).state(tel.clock()) is TelemetryState.OK

        wait_until("both GPU hosts", lambda: ok("h1") and ok("h2"), 30, 0.05)
        assert tel.snapshot("h3").state(tel.clock()) is TelemetryState.NO_GPUS
        loop = wait_until("h1's nvidia-smi loop", lambda: stream_on(gpu_testbed, "h1"), 30, 0.05)
        assert loop is not None
        session = parent_of(loop)
        os.kill(session, signal.SIGKILL)  # the sshd process serving the channel
        snap = wait_until("h1 marked", lambda: (s := tel.snapshot("h1")).error and s, 30, 0.05)
        assert snap.state(tel.clock()) is TelemetryState.ERROR and snap.gpus
        assert ok("h2"), "another host's stream is untouched"
        blocks = tel.info("h1").blocks
        wait_until("h1 recovered", lambda: ok("h1") and tel.info("h1").blocks > blocks, 30, 0.05)
        assert tel.info("h1").restarts == 1
        assert stream_on(gpu_testbed, "h1") not in (None, loop)
    finally:
        tel.stop()
        fleet.close()


@pytest.mark.testbed
def test_lab_cut_link_goes_stale_then_recovers(gpu_testbed: Testbed, isolated_testbed: Testbed,
                                               tmp_path: Path) -> None:
    fleet = Fleet(load_inventory(lab_inventory(gpu_testbed, tmp_path)))
    tel = TelemetryStreams(fleet, interval_ms=300, backoff_s=0.5, max_backoff_s=2.0, silence_s=2.0)
    tel.start()
    try:
        wait_until("h1 sampled",
                   lambda: tel.snapshot("h1").state(tel.clock()) is TelemetryState.OK, 30, 0.05)
        isolated_testbed.cut("h1")  # packets dropped: the open channel just goes quiet
        wait_until("h1 stale or failed",
                   lambda: tel.snapshot("h1").state(tel.clock()) is not TelemetryState.OK, 30, 0.05)
        wait_until("the watchdog", lambda: tel.info("h1").restarts >= 1, 30, 0.05)
        isolated_testbed.heal("h1")
        blocks = tel.info("h1").blocks
        wait_until("recovery", lambda: tel.snapshot("h1").state(tel.clock()) is TelemetryState.OK
                 and tel.info("h1").blocks > blocks, 60, 0.05)
    finally:
        tel.stop()
        fleet.close()
