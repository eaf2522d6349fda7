"""`tfctl runs` and `tfctl report` the morning after, on the lab, with no client during the run.

h1 has four GPUs (the test-only nvidia-smi stand-in) and runs a `per_host` worker whose code
uses only GPU 0 (tests/data/jobs/first_gpu_only.py). Nothing of tfctl runs between `up` and the
end: the hosts end the job and record it. Then `runs --json` lists it with how it ended, and
`report` names GPUs 1–3 idle while GPU 0 worked; a real browser (headless Chromium) draws the
page, and the PNGs are real, non-blank images.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fakes import NVIDIA_SMI_STANDIN
from tests.lab.lab import Lab
from tests.labtools import HERE, processes_of_run, run_id_from, tfctl

JOB = {"script": "job.py", "strategy": "flags", "workers": "per_host",
       "args": ["--steps=40"]}  # 8 s of training


@pytest.fixture
def four_gpu_lab(lab: Lab) -> Iterator[Lab]:
    config = lab.host("h1").dir / "four-gpus.json"
    config.write_text(json.dumps({"host": "h1", "gpus": [{}, {}, {}, {}]}))
    lab.write_tool("h1", "nvidia-smi", f"#!/bin/sh\nexport TFCTL_TEST_NVSMI_CONFIG={config}\n"
                                       f"exec {sys.executable} {NVIDIA_SMI_STANDIN} \"$@\"\n")
    yield lab
    lab.remove_from_path("h1", "nvidia-smi")


def _image_is_drawn(path: Path) -> bool:
    from matplotlib import image

    pixels = image.imread(str(path))
    return pixels.ndim == 3 and min(pixels.shape[:2]) > 100 and float(pixels.std()) > 0.02


def test_report_names_idle_gpus_after_an_unattended_run(four_gpu_lab: Lab, tmp_path: Path,
                                                        down_after: list[Path]) -> None:
    lab = four_gpu_lab
    jobs = tmp_path / "job"
    jobs.mkdir()
    shutil.copy(HERE / "data" / "jobs" / "first_gpu_only.py", jobs / "job.py")
    shutil.copy(HERE / "lightjob.py", jobs / "lightjob.py")
    inv = lab.write_inventory(jobs / "cluster.yaml", JOB, hosts=["h1"], gpus={"h1": 4})
    down_after.append(inv)
    up = tfctl(inv, "up")
    assert up.returncode == 0, up.stdout + up.stderr
    run_id = run_id_from(up.stdout)
    run_dir = lab.host("h1").workdir / ".tfctl" / "runs" / run_id
    deadline = time.monotonic() + 90
    while processes_of_run(run_id) or not (run_dir / "finished.json").exists():
        assert time.monotonic() < deadline, processes_of_run(run_id)
        time.sleep(0.5)

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
