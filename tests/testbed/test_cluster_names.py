"""The cluster spec on real sshd hosts: hosts named by ~/.ssh/config aliases (behind an
`Include`, one behind a jump host) are planned and checked by their HostNames, which the hosts
can reach (the lab's /etc/hosts knows only h1..hN, never the aliases); and a name the hosts
cannot resolve is said to be that, not a firewall.

Such hosts training together with real TensorFlow (ParameterServerStrategy with a chief):
tests/testbed/test_tf.py::test_tf_config_parameter_server_strategy_with_chief. The pure parts
(the plan, `ssh -G`, check's words): tests/unit/test_cluster_address.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.testbedtools import aliased_jump_inventory, examples_job_dir, job_dir, tfctl

pytestmark = pytest.mark.testbed


@pytest.mark.tf  # check imports TensorFlow on each host
def test_hosts_named_by_ssh_aliases_are_planned_and_pass_check(testbed, tmp_path: Path  # type: ignore[no-untyped-def]
                                                               ) -> None:
    job = {"script": "train.py", "strategy": "parameter_server", "chief": True,
           "args": ["--steps=20", "--log_every=10", "--train_dir=out/aliases"]}
    inv, home = aliased_jump_inventory(testbed, tmp_path, job, include=True,
                                       folder=examples_job_dir(tmp_path))
    env = {"HOME": str(home)}
    h1, h2 = testbed.host("h1"), testbed.host("h2")
    plan = json.loads(tfctl(inv, "plan", "--json", env=env).stdout)
    assert plan["cluster"]["ps"] == [f"{h1.address}:2222", f"{h2.address}:2222"], plan["cluster"]
    assert "box" not in json.dumps(plan["cluster"])  # the aliases stay on the client
    check = tfctl(inv, "check", "-v", env=env, timeout=180)
    assert check.returncode == 0, check.stdout + check.stderr
    assert "h1: reaches 2 task ports on its peers" in check.stdout  # h2's ps and worker
    assert "h2: reaches 3 task ports on its peers" in check.stdout  # h1's, and the chief's


def test_a_cluster_address_the_hosts_cannot_resolve_is_said_to_be_that(testbed, tmp_path: Path  # type: ignore[no-untyped-def]
                                                                       ) -> None:
    inv = testbed.write_inventory(job_dir(tmp_path) / "cluster.yaml",
                              {"script": "job.py", "style": "flags"}, hosts=["h1", "h2"],
                              host_fields={"h2": {"cluster_address": "nosuchhost.invalid"}})
    plan = tfctl(inv, "plan")
    assert "ps_hosts=" in plan.stdout and "nosuchhost.invalid:2222" in plan.stdout, plan.stdout
    check = tfctl(inv, "check", timeout=180)
    assert check.returncode == 1, check.stdout + check.stderr
    assert ("h1: cannot resolve 'nosuchhost.invalid', the name the cluster spec gives h2"
            in check.stdout), check.stdout
    assert "correct its `cluster_address:`" in check.stdout
    assert "firewall between hosts" not in check.stdout, check.stdout
    # h2 reaches h1 by h1's own address: only the unresolvable name fails.
    assert "h2: ok" in check.stdout, check.stdout
