"""`up` with a state folder it cannot write (remote/runs/current.py): one sentence before
anything starts, no traceback, nothing synced or started."""

from __future__ import annotations

from pathlib import Path

from tests.support.localcluster import local_cluster, run_tfctl


def test_up_says_it_cannot_write_its_state_before_anything_starts(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    inv = local_cluster(tmp_path, {"a": {"ps": 1}})
    up = run_tfctl(inv, "up", env={"XDG_STATE_HOME": str(blocker / "state")})
    assert up.returncode == 1, up.stdout + up.stderr
    assert up.stderr.startswith(f"error: cannot write tfctl's state folder {blocker}/state/tfctl")
    assert up.stderr.rstrip().endswith("nothing was started"), up.stderr
    assert up.stderr.count("\n") == 1 and "Traceback" not in up.stderr
    assert not (tmp_path / "work-a").exists()
