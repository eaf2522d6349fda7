"""Real distributed TensorFlow (CPU) launched by tfctl on three real sshd hosts, both styles.

One run (ParameterServerStrategy with a chief, all at once) names its hosts only by
~/.ssh/config aliases, behind an `Include`, h2 behind a jump host: it trains because the cluster
spec names their HostNames, which the hosts can reach (the lab's /etc/hosts knows only h1..hN,
never the aliases). That inventory's `plan` and `check`: tests/testbed/test_cluster_names.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.testbedtools import (
    aliased_jump_inventory,
    examples_job_dir,
    processes_of_run,
    run_id_from,
    tfctl,
)
from tests.support.trainer import assert_whole_checkpoint_here

pytestmark = [pytest.mark.testbed, pytest.mark.tf]

EXAMPLES = Path(__file__).parents[2] / "examples"



def _run(testbed, tmp_path: Path, job: dict, up_args: tuple[str, ...] = (), *,  # type: ignore[no-untyped-def, type-arg]
         aliases: bool = False, **kw) -> tuple[Path, str, str]:
    """Plan, up, check every task against the plan while it runs, wait, and the logs.
    `aliases`: h1 and h2 named by ~/.ssh/config aliases (testbedtools.aliased_jump_inventory)."""
    env: dict[str, str] = {}
    if aliases:
        inv, home = aliased_jump_inventory(testbed, tmp_path, job, include=True,
                                           folder=examples_job_dir(tmp_path))
        env["HOME"] = str(home)
    else:
        inv = testbed.write_inventory(examples_job_dir(tmp_path) / "cluster.yaml", job, **kw)
    plan = json.loads(tfctl(inv, "plan", "--json", env=env).stdout)
    if aliases:
        assert "box" not in json.dumps(plan["cluster"])  # the aliases stay on the client
    up = tfctl(inv, "up", *up_args, env=env, timeout=300)
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        run_id = run_id_from(up.stdout)
        # While it runs: every live task's mask and role are exactly what `plan` printed.
        for tagged in processes_of_run(run_id).values():  # read once: a task may end
            task = next(t for t in plan["tasks"] if t["name"] == tagged["TFCTL_TASK"])
            assert tagged["CUDA_VISIBLE_DEVICES"] == task["cuda_visible_devices"]
            if "TF_CONFIG" in task["env"]:
                assert tagged["TF_CONFIG"] == task["env"]["TF_CONFIG"]
        wait = tfctl(inv, "wait", "--timeout", "240", env=env, timeout=300)
        if wait.returncode != 0:
            raise AssertionError(wait.stderr + tfctl(inv, "logs", "-n", "30", env=env).stdout)
        assert processes_of_run(run_id) == {}
        return inv, run_id, tfctl(inv, "logs", "-n", "400", env=env).stdout
    finally:
        tfctl(inv, "down", "--grace", "1", env=env)


# `up` (all at once, the default) starts the workers (and the chief) before the parameter
# servers listen:
# TensorFlow's sessions and the coordinator wait for them, and the job runs the same.
ORDERS = [pytest.param(("--ps-first",), id="ps-first"), pytest.param((), id="all-at-once")]


@pytest.mark.parametrize("up_args", ORDERS)
def test_flags_style_between_graph(testbed, tmp_path: Path, up_args: tuple[str, ...]) -> None:  # type: ignore[no-untyped-def]
    job = {"script": "train.py", "style": "flags", "args": ["--steps=40", "--log_every=10"]}
    _, _, logs = _run(testbed, tmp_path, job, up_args, ps={"h2": 0, "h3": 0})
    assert "worker:0 | RESULT" in logs
    out = testbed.host("h1").workdir / "out"  # worker 0 (the chief) runs on h1
    assert list((out / "ckpt").glob("ckpt-*.index"))
    assert list((out / "train").glob("events.out.tfevents.*"))


def test_tf_config_multi_worker_mirrored(testbed, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    job = {"script": "train.py", "style": "tf_config", "args": ["--steps=30", "--log_every=10"]}
    _, _, logs = _run(testbed, tmp_path, job, ps={"h1": 0, "h2": 0}, hosts=["h1", "h2"])
    assert "worker:0 | RESULT" in logs and '"style": "multi_worker"' in logs
    out = testbed.host("h1").workdir / "out"
    assert list((out / "ckpt").glob("ckpt-*.index"))
    assert list((out / "train").glob("events.out.tfevents.*"))


@pytest.mark.parametrize(("up_args", "aliases"), [
    pytest.param(("--ps-first",), False, id="ps-first"),
    pytest.param((), True, id="all-at-once-by-ssh-aliases")])
def test_tf_config_parameter_server_strategy_with_chief(testbed, tmp_path: Path,  # type: ignore[no-untyped-def]
                                                        up_args: tuple[str, ...],
                                                        aliases: bool) -> None:
    # TF's default would write one checkpoint shard on each ps host; the bundled trainer has the
    # chief read and write it whole (experimental_io_device), so a train dir relative to each
    # host's own workdir works: no filesystem shared between the hosts.
    train_dir = f"out/ps-{len(up_args)}"
    job = {"script": "train.py", "strategy": "parameter_server", "chief": True,
           "args": [f"--train_dir={train_dir}", "--steps=30", "--log_every=10"]}
    _, _, logs = _run(testbed, tmp_path, job, up_args, aliases=aliases,
                      hosts=["h1", "h2"])  # ps on h1 and h2
    assert "chief:0 | RESULT" in logs and '"style": "ps_strategy"' in logs
    # Every shard of the last checkpoint is on the chief's host (h1), none was lost on h2.
    assert_whole_checkpoint_here(testbed.host("h1").workdir / train_dir / "ckpt", 30)
