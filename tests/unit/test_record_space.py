"""A run's records on a full disk (remote/agent/disk.py, record.py): they stop instead of ending
the watcher, say so in `records.state` (written in place, taking no new room), and resume with
room, leaving a `records` event for the gap; `status` words it. On a real filesystem that fills
up (a small tmpfs; needs root to mount it) and on the lab: tests/testbed/test_disk_full.py."""

from __future__ import annotations

import errno
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tfctl.remote.agent import disk, record
from tfctl.remote.agent.disk import STATE_BYTES, RecordSpace, records_state
from tfctl.remote.runs.status import records_words


@pytest.fixture(autouse=True)
def _no_space_kept() -> Iterator[None]:
    """The recorder's spaces are for one test's small_fs (tests/support/fixtures.py) only."""
    yield
    record._spaces.clear()


def fill(where: Path) -> None:
    with open(where / "filler", "wb") as f, pytest.raises(OSError) as caught:
        while True:
            f.write(b"\0" * 65536)
            f.flush()
    assert caught.value.errno == errno.ENOSPC


def test_records_stop_on_a_full_disk_and_the_state_needs_no_room(small_fs: Path) -> None:
    events = record.EventLog(str(small_fs), [])
    events.write({"event": "start", "task": "worker:0"})
    assert (small_fs / disk.STATE_FILE).stat().st_size == STATE_BYTES
    assert records_state(str(small_fs)) is None
    fill(small_fs)
    events.tick()  # below LOW_BYTES free: stopped before any write is refused
    state = records_state(str(small_fs))
    assert state is not None and state["why"] == "disk full" and state["free_bytes"] < 65536
    events.write({"event": "exit", "task": "worker:0"})  # dropped whole, no exception
    assert record.append_record(str(small_fs), "throughput.csv", "1,worker:0,5,steps/s\n") \
        is False
    lines = (small_fs / "events.jsonl").read_text().splitlines()
    assert [json.loads(x)["event"] for x in lines] == ["start"]
    (small_fs / "filler").unlink()  # room again
    events.tick()
    assert records_state(str(small_fs)) is None
    gap = json.loads((small_fs / "events.jsonl").read_text().splitlines()[-1])
    assert gap["event"] == "records" and gap["why"] == "disk full"
    assert gap["resumed_at"] >= gap["stopped_at"]


def test_a_refused_write_stops_the_records(tmp_path: Path) -> None:
    space = RecordSpace(str(tmp_path))
    space.failed(OSError(errno.EDQUOT, "Disk quota exceeded"), "gpu.csv")
    assert not space.ok
    state = records_state(str(tmp_path))
    assert state is not None and (state["why"], state["record"]) == ("disk quota exceeded",
                                                                     "gpu.csv")
    other = RecordSpace(str(tmp_path / "elsewhere"))  # not even room for the state file
    other.failed(OSError(errno.EIO, "Input/output error"), "events.jsonl")
    assert other.ok  # only a lack of room stops the records


def test_status_words() -> None:
    said = records_words("h2", {"since": 0.0, "why": "disk full", "free_bytes": 12 * 1024})
    assert said.startswith("records stopped on h2 since ")
    assert "disk full (12 KiB free); its tasks keep running" in said
