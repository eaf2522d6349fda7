"""Sync details on the lab: the SFTP fallback (hosts without rsync) moves only changed files."""

from __future__ import annotations

import os
import shlex
import time
from pathlib import Path

import pytest

from tests.support.testbedtools import job_dir
from tfctl.inventory.load import load_inventory
from tfctl.remote.connect.fleet import Fleet
from tfctl.remote.sync.rsync import list_source_files, source_dir
from tfctl.remote.sync.sftp import sftp_sync

pytestmark = pytest.mark.testbed


def test_sftp_fallback_copies_changed_files_only(testbed, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    d = job_dir(tmp_path)
    (d / "pkg").mkdir()
    (d / "pkg" / "a.py").write_text("a = 1\n")
    (d / "notes.log").write_text("ignored\n")
    (d / ".gitignore").write_text("*.log\n")
    inv = load_inventory(testbed.write_inventory(d / "cluster.yaml", {"script": "job.py"},
                                             hosts=["h2"]))
    dest = str(testbed.host("h2").workdir / "sftp-copy")
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


def test_a_command_gets_its_whole_stdin_at_once(testbed, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """`Transport.run(stdin=...)` over Fabric: 200 kB arrive whole (invoke would feed a stream
    one byte per 10 ms: over half an hour), and a command that reads none of it still ends."""
    inv = load_inventory(testbed.write_inventory(job_dir(tmp_path) / "cluster.yaml",
                                             {"script": "job.py"}, hosts=["h2"]))
    text = "".join(f"line {i:06d}\n" for i in range(16_000))  # 192 kB
    with Fleet(inv) as fleet:
        t = fleet.transport("h2")
        target = testbed.host("h2").workdir / "piped.txt"
        got = t.run(f"cat > {shlex.quote(str(target))} && wc -c < {shlex.quote(str(target))}",
                    stdin=text, timeout_s=60)
        assert (got.exit_code, got.stdout.strip()) == (0, str(len(text)))
        assert target.read_text() == text
        ignored = t.run("exit 3", stdin=text, timeout_s=60)
        assert ignored.exit_code == 3
