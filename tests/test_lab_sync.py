"""Sync details on the lab: the SFTP fallback (hosts without rsync) moves only changed files."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from tests.labtools import job_dir
from tfctl.inventory.load import load_inventory
from tfctl.remote.connect.fleet import Fleet
from tfctl.remote.sync.rsync import list_source_files, source_dir
from tfctl.remote.sync.sftp import sftp_sync

pytestmark = pytest.mark.lab


def test_sftp_fallback_copies_changed_files_only(lab, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    d = job_dir(tmp_path)
    (d / "pkg").mkdir()
    (d / "pkg" / "a.py").write_text("a = 1\n")
    (d / "notes.log").write_text("ignored\n")
    (d / ".gitignore").write_text("*.log\n")
    inv = load_inventory(lab.write_inventory(d / "cluster.yaml", {"script": "job.py"},
                                             hosts=["h2"]))
    dest = str(lab.host("h2").workdir / "sftp-copy")
    with Fleet(inv) as fleet:
        t = fleet.transport("h2")
        files = list_source_files(source_dir(inv), inv)
        assert sorted(files) == [".gitignore", "cluster.yaml", "job.py", "pkg/a.py"]
        first = sftp_sync(t, source_dir(inv), dest, files)
        assert sorted(first.changed) == sorted(files)
        assert Path(dest, "pkg", "a.py").read_text() == "a = 1\n"
        assert os.access(Path(dest, "job.py"), os.R_OK)
        again = sftp_sync(t, source_dir(inv), dest, files)
        assert again.changed == ()
        time.sleep(1.1)
        (d / "pkg" / "a.py").write_text("a = 2\n")
        third = sftp_sync(t, source_dir(inv), dest, files)
        assert third.changed == ("pkg/a.py",)
        assert Path(dest, "pkg", "a.py").read_text() == "a = 2\n"
