"""`tfctl runs` and `tfctl report` the morning after, on the lab, with no client during the run.

h1 has four GPUs (the test-only nvidia-smi stand-in) and runs a `per_host` worker whose code
uses only GPU 0 (tests/support/data/jobs/first_gpu_only.py). Nothing of tfctl runs between `up` and
the end: the hosts end the job and record it. Then `runs --json` lists it with how it ended, and
`report` names GPUs 1–3 idle while GPU 0 worked; a real browser (headless Chromium) draws the
page, and the PNGs are real, non-blank images. The same holds on a driver from before the
`clocks_event_reasons` rename; where nvidia-smi records nothing (NVML failing), the report says
so, with why, and claims nothing about those GPUs.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.support.fakes import NVML_MISMATCH
from tests.support.testbed.testbed import Testbed
from tests.support.testbedtools import HERE, Up, processes_of_run, tfctl

JOB = {"script": "job.py", "strategy": "flags", "workers": "per_host",
       "args": ["--steps=40"]}  # 8 s of training


def _four_gpus(testbed: Testbed, env: str = "", **config: str) -> Iterator[Testbed]:
    """h1's nvidia-smi: the stand-in with four GPUs (`config`: e.g. the driver it plays;
    `env`: shell lines exported before it runs, e.g. a failure)."""
    testbed.standin_gpus("h1", 4, env, **config)
    yield testbed
    testbed.remove_from_path("h1", "nvidia-smi")


@pytest.fixture
def four_gpu_lab(testbed: Testbed) -> Iterator[Testbed]:
    yield from _four_gpus(testbed)


@pytest.fixture
def old_driver_lab(testbed: Testbed) -> Iterator[Testbed]:
    """A driver from before the rename: `clocks_event_reasons.active` is refused."""
    yield from _four_gpus(testbed, driver="old")


@pytest.fixture
def failing_nvsmi_lab(testbed: Testbed) -> Iterator[Testbed]:
    """nvidia-smi answers every query with an NVML failure: nothing can be recorded."""
    yield from _four_gpus(testbed, env=f"export TFCTL_TEST_NVSMI_FAIL='{NVML_MISMATCH}'\n")


def _run_to_its_end(testbed: Testbed, tmp_path: Path,
                    up_run: Callable[..., Up]) -> tuple[Path, Path]:
    """The first-GPU-only job, up and ended by the hosts; (inventory, h1's run folder)."""
    jobs = tmp_path / "job"
    jobs.mkdir()
    shutil.copy(HERE / "data" / "jobs" / "first_gpu_only.py", jobs / "job.py")
    shutil.copy(HERE / "lightjob.py", jobs / "lightjob.py")
    inv = testbed.write_inventory(jobs / "cluster.yaml", JOB, hosts=["h1"], gpus={"h1": 4})
    run_id = up_run(inv).run_id
    run_dir = testbed.host("h1").workdir / ".tfctl" / "runs" / run_id
    deadline = time.monotonic() + 90
    while processes_of_run(run_id) or not (run_dir / "finished.json").exists():
        assert time.monotonic() < deadline, processes_of_run(run_id)
        time.sleep(0.5)
    return inv, run_dir


def _image_is_drawn(path: Path) -> bool:
    from matplotlib import image

    pixels = image.imread(str(path))
    return pixels.ndim == 3 and min(pixels.shape[:2]) > 100 and float(pixels.std()) > 0.02


def test_report_names_idle_gpus_after_an_unattended_run(four_gpu_lab: Testbed, tmp_path: Path,
                                                        up_run: Callable[..., Up]) -> None:
    inv, run_dir = _run_to_its_end(four_gpu_lab, tmp_path, up_run)
    run_id = run_dir.name

    listed = json.loads(tfctl(inv, "runs", "--json").stdout)["runs"]
    assert [(r["run_id"], r["ended"]) for r in listed][:1] == [(run_id, "exit 0: worker:0 ended")]

    out = tmp_path / "report"
    report = tfctl(inv, "report", "-o", str(out))
    assert report.returncode == 0, report.stdout + report.stderr
    assert "h1 GPU 1, 2, 3 idle" in report.stdout and "while GPU 0 (" in report.stdout
    assert "SIGTERM" not in report.stdout  # the ps stopped at the job's end is no failure
    page = (out / "report.html").read_text()
    assert "h1 GPU 1, 2, 3 idle" in page and page.count("data:image/png;base64,") == 3
    assert "<script" not in page  # offline and self-contained: nothing to load or run
    for name in ("gpus-h1.png", "speed.png", "timeline.png"):
        assert _image_is_drawn(out / name), name

    chromium = shutil.which("chromium")
    if chromium is None:
        pytest.fail("chromium is not installed: scripts/test installs it (system-packages.txt)")
    shot = tmp_path / "page.png"
    browser = subprocess.run(
        [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
         "--no-first-run", "--disable-background-networking", "--disable-component-update",
         "--disable-sync", f"--user-data-dir={tmp_path / 'chromium'}", "--enable-logging=stderr",
         "--window-size=1200,2400", f"--screenshot={shot}", (out / "report.html").as_uri()],
        capture_output=True, text=True, timeout=120)
    assert shot.is_file(), browser.stderr[-2000:]
    assert "Uncaught" not in browser.stderr and "CONSOLE" not in browser.stderr
    assert _image_is_drawn(shot)  # the page is drawn, not blank


def test_a_driver_from_before_the_rename_is_recorded_and_its_idle_gpus_named(
        old_driver_lab: Testbed, tmp_path: Path, up_run: Callable[..., Up]) -> None:
    inv, run_dir = _run_to_its_end(old_driver_lab, tmp_path, up_run)
    gpus = json.loads((run_dir / "gpus.json").read_text())
    assert "unrecorded" not in gpus and gpus["fields"][-1] == "clocks_throttle_reasons.active"
    assert (run_dir / "gpu.csv").read_text().count("\n") >= 8  # a few seconds of four GPUs
    out = tmp_path / "report"
    report = tfctl(inv, "report", "-o", str(out))
    assert report.returncode == 0, report.stdout + report.stderr
    assert "h1 GPU 1, 2, 3 idle" in report.stdout and "while GPU 0 (" in report.stdout
    assert "no GPU samples" not in report.stdout
    assert _image_is_drawn(out / "gpus-h1.png")


def test_where_nvidia_smi_records_nothing_the_report_says_so_and_claims_nothing(
        failing_nvsmi_lab: Testbed, tmp_path: Path, up_run: Callable[..., Up]) -> None:
    inv, run_dir = _run_to_its_end(failing_nvsmi_lab, tmp_path, up_run)
    assert json.loads((run_dir / "gpus.json").read_text())["unrecorded"] == NVML_MISMATCH
    out = tmp_path / "report"
    report = tfctl(inv, "report", "-o", str(out))
    assert report.returncode == 0, report.stdout + report.stderr
    said = f"no GPU samples were recorded on h1 (why: {NVML_MISMATCH}); worker:0 had GPUs there"
    assert said in report.stdout
    page = (out / "report.html").read_text()
    assert said in page and "unknown: no GPU samples were recorded" in page
    assert "idle" not in report.stdout and "every GPU" not in page and "0.00 /" not in page
    # the hours worker:0 held its GPUs are known (from its start and exit), their energy is not
    assert f"energy unknown (no GPU samples: {NVML_MISMATCH}: h1 GPU 0, h1 GPU 1, h1 GPU 2, " \
        "h1 GPU 3)" in report.stdout and " Wh" not in report.stdout + page
    assert not (out / "gpus-h1.png").exists()
    assert page.count("data:image/png;base64,") == 2  # speed and timeline: what was recorded
