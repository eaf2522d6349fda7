"""The sharded-checkpoint trap, with real TensorFlow on three lab hosts.

A tutorial-style between-graph script (tests/support/data/jobs/sharded_flags.py) with a ps on every
host and a relative `--logdir`: `plan` warns before anything runs, naming both ways out; the
chief's first save then fails on another host's ps, and `wait` names that error (NOT_FOUND …
No such file or directory) with the hint, not the stack frames above it.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.support.testbedtools import processes_of_run, run_id_from, tfctl

pytestmark = [pytest.mark.testbed, pytest.mark.tf]

SCRIPT = Path(__file__).parents[1] / "support" / "data" / "jobs" / "sharded_flags.py"


def test_ps_on_every_host_is_warned_then_the_failed_save_is_named(testbed, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    job_dir = tmp_path / "job"
    job_dir.mkdir()
    shutil.copy(SCRIPT, job_dir / "train.py")
    job = {"script": "train.py", "strategy": "flags", "args": ["--logdir=out/train"]}
    inv = testbed.write_inventory(job_dir / "cluster.yaml", job)  # ps: 1 on h1, h2, h3
    plan = " ".join(tfctl(inv, "plan").stdout.split())  # as one line, whatever the wrapping
    assert "(sharded) checkpoint" in plan and "shared_fs: true" in plan
    up = tfctl(inv, "up", timeout=300)
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        run_id = run_id_from(up.stdout)
        wait = tfctl(inv, "wait", "--timeout", "180", timeout=240)
        said = wait.stdout + wait.stderr
        assert wait.returncode != 0, said
        assert "No such file or directory" in said and "NOT_FOUND" in said, said
        assert "every ps and the chief see" in said, said  # the hint
        assert processes_of_run(run_id) == {}
    finally:
        tfctl(inv, "down", "--grace", "1")
