"""A run whose hosts recorded no GPU sample: `tfctl report`'s records, findings and page say
so, with the recorder's reason, and claim nothing about those GPUs (remote/history/records.py,
findings.py, tui/report/page.py) — no empty GPU figure, no 0.00 GPU-hours, no "every GPU
worked"."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tfctl.remote.history.findings import all_findings, summarize
from tfctl.remote.history.records import RUN_FOLDER, read_run, why_unsampled
from tfctl.tui.report.page import write_report

REFUSED = 'nvidia-smi refused the query: Field "clocks_event_reasons.active" is not a valid ' \
    "field to query."


def _host(root: Path, host: str, tasks: dict[str, str], gpus_json: dict[str, object] | None,
          gpu_csv: str = "") -> None:
    """One host's collected run folder: tasks (name → CUDA_VISIBLE_DEVICES) that ran and ended."""
    folder = root / host / RUN_FOLDER
    folder.mkdir(parents=True)
    (folder / "manifest.json").write_text(json.dumps({"created_at": 1000.0, "tasks": [
        {"name": name, "cuda_visible_devices": mask} for name, mask in tasks.items()]}))
    if gpus_json is not None:
        (folder / "gpus.json").write_text(json.dumps(gpus_json))
    (folder / "gpu.csv").write_text(gpu_csv)
    (folder / "events.jsonl").write_text("".join(
        json.dumps({"t": 1001.0 + i, "task": name, "event": event, "exit_code": 0}) + "\n"
        for name in tasks for i, event in enumerate(("start", "exit"))))
    (folder / "finished.json").write_text(json.dumps(
        {"finished_at": 1060.0, "status": {"exit_code": 0, "cause": "worker:0 ended"}}))


FOUR_GPUS = [{"index": str(i), "uuid": f"GPU-{i}", "name": "GPU", "memory_total_mib": "11264"}
             for i in range(4)]


@pytest.mark.parametrize(("gpus_json", "why"), [
    ({"started_at": 1000.0, "gpus": FOUR_GPUS, "unrecorded": REFUSED}, REFUSED),
    ({"started_at": 1000.0, "gpus": [], "unrecorded": "No devices were found"},
     "No devices were found"),
    ({"started_at": 1000.0, "gpus": FOUR_GPUS}, "nvidia-smi gave no sample"),
    (None, "its run folder holds no gpus.json: the recorder did not start"),
])
def test_a_host_without_samples_is_said_so_and_nothing_is_claimed(
        tmp_path: Path, gpus_json: dict[str, object] | None, why: str) -> None:
    root = tmp_path / "runs" / "r1"
    _host(root, "h1", {"worker:0": "0,1,2,3"}, gpus_json)
    record = read_run(str(root), "r1")
    findings = all_findings(record)
    summary = summarize(record)
    assert record.gpus == [] and record.unsampled == {"h1": why}
    assert [(f.level, f.text) for f in findings] == [
        ("warn", f"no GPU samples were recorded on h1 (why: {why}); worker:0 had GPUs there: "
                 "nothing is said about its GPUs")]
    assert summary.gpu_hours_busy is None and summary.gpu_hours_idle is None
    written = write_report(record, summary, findings, str(tmp_path / "report"))
    page = Path(written.page).read_text()
    assert "no GPU samples were recorded on h1 (why: " in page
    assert "unknown: no GPU samples were recorded" in page
    assert "energy unknown (no GPU samples: " in page  # the hours held are known, not energy
    assert "0.00 /" not in page and " Wh" not in page and "every GPU" not in page
    assert not (tmp_path / "report" / "gpus-h1.png").exists()  # no empty GPU figure
    assert [Path(p).name for p in written.pngs] == ["timeline.png"]


def test_gpu_hours_count_only_the_hosts_with_samples(tmp_path: Path) -> None:
    root = tmp_path / "runs" / "r1"
    samples = "".join(f"{t},{i},{95 if i == 0 else 0},900,60,200,0x0\n"
                      for t in range(3600) for i in range(2))
    _host(root, "h1", {"worker:0": "0"}, {"started_at": 1000.0, "gpus": FOUR_GPUS[:2]}, samples)
    _host(root, "h2", {"ps:0": ""}, {"started_at": 1000.0, "gpus": [],
                                     "unrecorded": "nvidia-smi was not found on the PATH"})
    record = read_run(str(root), "r1")
    findings = all_findings(record)
    summary = summarize(record)
    assert (summary.gpu_hours_busy, summary.gpu_hours_idle) == (1.0, 1.0)
    said = [(f.level, f.text) for f in findings]
    assert ("info", "no GPU samples were recorded on h2 (why: nvidia-smi was not found on the "
                    "PATH): nothing is said about its GPUs") in said
    assert any(f.text.startswith("h1 GPU 1 idle") for f in findings)
    page = Path(write_report(record, summary, findings, str(tmp_path / "out")).page).read_text()
    assert "1.00 / 1.00 (without h2: no samples there)" in page


def test_why_unsampled_prefers_the_recorders_word() -> None:
    assert why_unsampled({"unrecorded": "x", "gpus": FOUR_GPUS}, True) == "x"
    assert why_unsampled({"gpus": []}, True) == "nvidia-smi listed no GPUs"
