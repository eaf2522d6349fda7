"""The nvidia-smi stand-in (tests/support/fakes) run as a real program, read by tfctl's real parser.

GPU use is decided from real processes' environments, so these tests start real children. Each test
tags its stand-in and children with a unique TFCTL_TEST_NVSMI_TAG so processes of tests running
beside it on this machine are not counted.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.leftovers import kill_started
from tfctl.remote.gpus.lastseen import HostTelemetry, TelemetryState
from tfctl.remote.gpus.nvsmi import (
    DEFAULT_COMPUTE_APP_FIELDS,
    WANTED_COMPUTE_APP_FIELDS,
    WANTED_GPU_FIELDS,
    GpuSample,
    LoopParser,
    parse_compute_apps,
    parse_gpu_rows,
    query_compute_apps_argv,
    query_gpu_argv,
    supported_fields,
)

STANDIN = Path(__file__).parents[1] / "support" / "fakes" / "nvidia_smi_standin.py"
CAPTURES = Path(__file__).parents[1] / "support" / "data" / "nvidia-smi"
LAB_GPUS = {
    "host": "lab-host-1",
    "gpus": [
        {"name": "NVIDIA TITAN X (Pascal)", "memory_total_mib": 12288, "power_limit_w": 250},
        {"name": "NVIDIA GeForce GTX 970", "memory_total_mib": 4096, "power": None},
    ],
}
FIELDS = tuple(spellings[0] for spellings in WANTED_GPU_FIELDS)


class StandinBench:
    """Runs the stand-in and tagged child processes; kills the children it started."""

    def __init__(self, config_path: Path) -> None:
        self.tag = uuid.uuid4().hex
        self.config_path = config_path
        self.children: list[subprocess.Popen[Any]] = []

    def env(self, **extra: str) -> dict[str, str]:
        base = {k: v for k, v in os.environ.items() if not k.startswith(("CUDA_", "TFCTL_TEST_"))}
        return {**base, "TFCTL_TEST_NVSMI_TAG": self.tag, **extra}

    def nvsmi(self, argv: list[str], **extra_env: str) -> subprocess.CompletedProcess[str]:
        env = self.env(TFCTL_TEST_NVSMI_CONFIG=str(self.config_path), **extra_env)
        command = [sys.executable, str(STANDIN), *argv[1:]]  # argv[0] is "nvidia-smi"
        return subprocess.run(command, env=env, capture_output=True, text=True, timeout=30)

    def start(self, argv: list[str], **env: str) -> subprocess.Popen[bytes]:
        child = subprocess.Popen(argv, env=self.env(**env))
        self.children.append(child)
        return child

    def stop_all(self) -> None:
        kill_started(self.children)

    def gpus(self) -> dict[int, GpuSample]:
        result = self.nvsmi(query_gpu_argv(FIELDS))
        assert result.returncode == 0, result.stdout + result.stderr
        parsed = parse_gpu_rows(result.stdout, FIELDS)
        assert parsed.errors == () and parsed.skipped_lines == ()
        return {s.index: s for s in parsed.samples if s.index is not None}

    def apps(self) -> list[tuple[int | None, int, str | None, float | None]]:
        """(GPU index, pid, name, MiB) per compute app, via the real parsers."""
        uuid_to_index = {s.uuid: i for i, s in self.gpus().items()}
        result = self.nvsmi(query_compute_apps_argv())
        assert result.returncode == 0, result.stdout + result.stderr
        apps = parse_compute_apps(result.stdout)
        return [
            (uuid_to_index.get(p.gpu_uuid), p.pid, p.process_name, p.used_memory_mib) for p in apps
        ]


@pytest.fixture
def bench(tmp_path: Path) -> Iterator[StandinBench]:
    config = tmp_path / "gpus.json"
    config.write_text(json.dumps(LAB_GPUS), encoding="utf-8")
    bench = StandinBench(config)
    yield bench
    bench.stop_all()


def sleeper(bench: StandinBench, **env: str) -> subprocess.Popen[bytes]:
    return bench.start(["sleep", "120"], **env)


def test_gpu_1_is_busy_with_the_worker_that_has_mask_1(bench: StandinBench) -> None:
    idle = bench.gpus()
    assert [idle[0].utilization_gpu_pct, idle[1].utilization_gpu_pct] == [0.0, 0.0]
    worker = sleeper(bench, CUDA_VISIBLE_DEVICES="1")
    gpus = bench.gpus()
    assert gpus[0].utilization_gpu_pct == 0.0 and gpus[0].pstate == "P8"
    busy = gpus[1].utilization_gpu_pct
    assert busy is not None and 90.0 <= busy <= 99.0 and gpus[1].pstate == "P2"
    assert gpus[1].memory_used_mib is not None and gpus[1].memory_used_mib > 1500
    assert bench.apps() == [(1, worker.pid, "sleep", 1500.0)]


def test_config_shapes_the_gpus(bench: StandinBench) -> None:
    gpus = bench.gpus()
    assert [gpus[0].name, gpus[1].name] == ["NVIDIA TITAN X (Pascal)", "NVIDIA GeForce GTX 970"]
    assert [gpus[0].memory_total_mib, gpus[1].memory_total_mib] == [12288.0, 4096.0]
    assert gpus[0].power_limit_w == 250.0
    assert (gpus[1].power_draw_w, gpus[1].power_limit_w) == (None, None)  # old GeForce
    assert gpus[0].uuid != gpus[1].uuid and bench.gpus()[0].uuid == gpus[0].uuid  # stable


def test_which_processes_count(bench: StandinBench) -> None:
    everywhere = sleeper(bench, TFCTL_TEST_USES_GPU="1")
    sleeper(bench, TFCTL_TEST_USES_GPU="1", CUDA_VISIBLE_DEVICES="")  # ps: empty mask
    sleeper(bench)  # no opt-in, no mask
    sleeper(bench, CUDA_VISIBLE_DEVICES="-1,0")  # CUDA stops at the first invalid entry
    by_uuid_mask = sleeper(bench, CUDA_VISIBLE_DEVICES=bench.gpus()[1].uuid)
    bench.children.append(
        subprocess.Popen(
            ["sleep", "120"],
            env={**bench.env(CUDA_VISIBLE_DEVICES="0"), "TFCTL_TEST_NVSMI_TAG": "other-test"},
        )
    )
    assert sorted(bench.apps()) == sorted(
        [
            (0, everywhere.pid, "sleep", 1500.0),
            (1, everywhere.pid, "sleep", 1500.0),
            (1, by_uuid_mask.pid, "sleep", 1500.0),
        ]
    )


def test_dead_and_zombie_processes_do_not_count(bench: StandinBench) -> None:
    zombie = bench.start(["true"], CUDA_VISIBLE_DEVICES="0")
    while Path(f"/proc/{zombie.pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
        time.sleep(0.02)  # exited, not yet reaped: still listed in /proc
    assert bench.apps() == []
    assert bench.gpus()[0].utilization_gpu_pct == 0.0


def test_process_name_with_comma_survives_the_round_trip(bench: StandinBench) -> None:
    bash = shutil.which("bash")
    assert bash is not None
    child = bench.start(
        [bash, "-c", 'exec -a "trainer, v2 --lr=0.1,0.2" sleep 120'], CUDA_VISIBLE_DEVICES="0"
    )
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not bench.apps():
        time.sleep(0.05)  # until bash has exec'd
    assert bench.apps() == [(0, child.pid, "trainer, v2 --lr=0.1,0.2", 1500.0)]


def test_other_network_namespaces_are_other_hosts(bench: StandinBench) -> None:
    unshare = shutil.which("unshare")
    if unshare is None or subprocess.run([unshare, "--net", "true"]).returncode != 0:
        pytest.skip("needs unshare --net (root)")
    elsewhere = bench.start([unshare, "--net", "sleep", "120"], CUDA_VISIBLE_DEVICES="0")
    mine = sleeper(bench, CUDA_VISIBLE_DEVICES="1")
    own_namespace = os.readlink("/proc/self/ns/net")
    while os.readlink(f"/proc/{elsewhere.pid}/ns/net") == own_namespace:
        time.sleep(0.02)  # until unshare has moved into its new namespace
    assert [pid for _, pid, _, _ in bench.apps()] == [mine.pid]


def test_loop_mode_prints_blocks_until_killed(bench: StandinBench) -> None:
    env = bench.env(TFCTL_TEST_NVSMI_CONFIG=str(bench.config_path))
    argv = [sys.executable, str(STANDIN), *query_gpu_argv(FIELDS, interval_ms=100)[1:]]
    stream = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, text=True)
    bench.children.append(stream)
    assert stream.stdout is not None
    parser, indices = LoopParser(FIELDS), []
    worker = None
    for line in stream.stdout:
        item = parser.feed(line)
        assert isinstance(item, GpuSample), line
        indices.append(item.index)
        if len(indices) == 6:
            worker = sleeper(bench, CUDA_VISIBLE_DEVICES="0")  # later blocks must see it
        if worker is not None and item.index == 0 and item.utilization_gpu_pct:
            break
        assert len(indices) < 400, "GPU 0 never became busy"
    assert indices[:6] == [0, 1, 0, 1, 0, 1]
    stream.terminate()
    stream.wait(timeout=10)


def test_help_is_accepted_by_supported_fields(bench: StandinBench) -> None:
    gpu_help = bench.nvsmi(["nvidia-smi", "--help-query-gpu"]).stdout
    assert supported_fields(gpu_help) == FIELDS
    apps_help = bench.nvsmi(["nvidia-smi", "--help-query-compute-apps"]).stdout
    assert supported_fields(apps_help, WANTED_COMPUTE_APP_FIELDS) == DEFAULT_COMPUTE_APP_FIELDS


def test_units_and_header_parse_to_the_same_values(bench: StandinBench) -> None:
    plain = bench.gpus()
    with_units = bench.nvsmi(query_gpu_argv(FIELDS, with_units=True, with_header=True))
    assert with_units.stdout.startswith("timestamp, index, uuid, name")
    assert "MiB" in with_units.stdout and "[Not Supported]" in with_units.stdout
    parsed = {s.index: s for s in parse_gpu_rows(with_units.stdout, FIELDS).samples}
    for index, sample in plain.items():
        assert (parsed[index].uuid, parsed[index].memory_used_mib, parsed[index].power_limit_w) == (
            sample.uuid,
            sample.memory_used_mib,
            sample.power_limit_w,
        )


def test_list_gpus_has_the_real_shape(bench: StandinBench) -> None:
    real = (CAPTURES / "linux-x86_64__nvidia-h200__590.48.01.txt").read_text(encoding="utf-8")
    shape = re.compile(r"^GPU (\d+): (.+) \(UUID: (GPU-[0-9a-f-]+)\)$", re.MULTILINE)
    assert shape.findall(real)
    listed = shape.findall(bench.nvsmi(["nvidia-smi", "-L"]).stdout)
    gpus = bench.gpus()
    assert listed == [(str(i), gpus[i].name, gpus[i].uuid) for i in (0, 1)]


def test_failure_modes_read_as_host_states(bench: StandinBench) -> None:
    message = "Failed to initialize NVML: Driver/library version mismatch"
    failed = bench.nvsmi(query_gpu_argv(FIELDS), TFCTL_TEST_NVSMI_FAIL=message)
    assert failed.returncode == 9
    parsed = parse_gpu_rows(failed.stdout, FIELDS)
    assert parsed.errors == (message,)
    assert HostTelemetry.from_parse("h", parsed, at_s=1.0).state(1.0) is TelemetryState.ERROR

    unknown = bench.nvsmi(query_gpu_argv(("uuid", "no.such.field")))
    assert unknown.returncode == 2 and parse_gpu_rows(unknown.stdout, FIELDS).errors

    empty_config = bench.config_path.with_name("none.json")
    empty_config.write_text('{"gpus": []}', encoding="utf-8")
    bench.config_path = empty_config
    none = bench.nvsmi(query_gpu_argv(FIELDS))
    parsed = parse_gpu_rows(none.stdout, FIELDS)
    assert HostTelemetry.from_parse("h", parsed, at_s=1.0).state(1.0) is TelemetryState.NO_GPUS


def test_gpu_count_from_env(bench: StandinBench) -> None:
    env = bench.env(TFCTL_TEST_NVSMI_GPUS="3")
    argv = [sys.executable, str(STANDIN), *query_gpu_argv(FIELDS)[1:]]
    out = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=30).stdout
    assert [s.index for s in parse_gpu_rows(out, FIELDS).samples] == [0, 1, 2]


def test_installed_on_path_under_the_real_name(bench: StandinBench, tmp_path: Path) -> None:
    spec = importlib.util.spec_from_file_location("fakes", STANDIN.parent / "__init__.py")
    assert spec is not None and spec.loader is not None
    fakes = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fakes)
    link = fakes.install_nvidia_smi_standin(tmp_path / "bin")
    assert link.name == "nvidia-smi" and os.access(link, os.X_OK)
    env = bench.env(TFCTL_TEST_NVSMI_CONFIG=str(bench.config_path))
    env["PATH"] = f"{link.parent}{os.pathsep}{env.get('PATH', '')}"
    listed = subprocess.run(["nvidia-smi", "-L"], env=env, capture_output=True, text=True)
    assert listed.returncode == 0 and listed.stdout.startswith("GPU 0: NVIDIA TITAN X (Pascal)")
