"""remote/agent/record.GpuRecorder against the nvidia-smi stand-in, run as a real program.

Both drivers record samples: a newer one in the preferred spelling, one from before the
`clocks_event_reasons` rename (which refuses that name) in the old one. Where nothing can be
recorded, `gpus.json` says why, whatever nvidia-smi does: not there, no GPUs, NVML failing,
hanging.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.fakes import NVML_MISMATCH, make_standin_fail, standin_first_on_path
from tfctl.remote.agent import record
from tfctl.remote.agent.record import GpuRecorder


@pytest.fixture
def standin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """`nvidia-smi` on PATH: the stand-in, two GPUs, seeing no process of this machine."""
    standin_first_on_path(tmp_path / "bin", 2, monkeypatch)
    yield tmp_path


NOT_YET = "nvidia-smi had not answered the recorder yet"
"""What gpus.json says from the recorder's start until nvidia-smi has answered."""


def _record(run_dir: Path, until_samples: int = 0, limit_s: float = 30.0) -> dict[str, object]:
    """Run a recorder until gpu.csv holds `until_samples` lines or gpus.json says why not."""
    run_dir.mkdir(exist_ok=True)
    recorder = GpuRecorder(str(run_dir), "r1")
    asking = threading.Event()  # the recorder's thread asks nvidia-smi once the test has looked
    ask = recorder._record
    recorder._record = lambda: asking.wait(limit_s) and ask()  # type: ignore[method-assign]
    recorder.start()
    assert json.loads((run_dir / "gpus.json").read_text())["unrecorded"] == NOT_YET  # until it does
    asking.set()
    recorder.asked.wait(limit_s)
    deadline = time.monotonic() + limit_s
    info: dict[str, object] = {}
    try:
        while time.monotonic() < deadline:
            gpus = run_dir / "gpus.json"
            info = json.loads(gpus.read_text()) if gpus.exists() else {}
            lines = (run_dir / "gpu.csv").read_text().splitlines() \
                if (run_dir / "gpu.csv").exists() else []
            known = info.get("unrecorded", NOT_YET) != NOT_YET  # a reason, not the placeholder
            if known or (until_samples and len(lines) >= until_samples):
                return info
            time.sleep(0.2)
    finally:
        recorder.stop()
    return info


@pytest.mark.parametrize(("driver", "spelling"), [
    ("", "clocks_event_reasons.active"),
    ("old", "clocks_throttle_reasons.active"),
])
def test_both_drivers_record_samples_with_the_throttle_mask(
        standin: Path, monkeypatch: pytest.MonkeyPatch, driver: str, spelling: str) -> None:
    if driver:
        monkeypatch.setenv("TFCTL_TEST_NVSMI_DRIVER", driver)
    info = _record(standin / "run", until_samples=4)
    assert "unrecorded" not in info, info
    assert info["fields"][-1] == spelling  # type: ignore[index]
    rows = [line.split(",") for line in (standin / "run" / "gpu.csv").read_text().splitlines()]
    assert len(rows) >= 4 and {r[1] for r in rows} == {"0", "1"}
    assert all(len(r) == 7 and r[6].startswith("0x") for r in rows)  # the mask is recorded


@pytest.mark.parametrize(("how", "why"), [
    ("no_gpus", "No devices were found"),
    ("nvml", NVML_MISMATCH),
    ("hangs", "nvidia-smi did not answer in 1 s"),
    ("not_on_path", "nvidia-smi was not found on the PATH"),
])
def test_where_nothing_is_recorded_gpus_json_says_why(
        standin: Path, monkeypatch: pytest.MonkeyPatch, how: str, why: str) -> None:
    monkeypatch.setattr(record, "NVSMI_ANSWER_S", 1.0)
    make_standin_fail(how, monkeypatch)
    info = _record(standin / "run")
    assert info.get("unrecorded") == why
    assert not (standin / "run" / "gpu.csv").exists()
