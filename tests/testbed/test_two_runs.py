"""Two runs on the same lab hosts, neither inventory writing `ports:`: both start, each on ports
of its own (the second run's taken ones chosen free at `up`), both stop with `down`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.support.testbedtools import (
    FOREVER,
    job_dir,
    processes_of_run,
    status_json,
    tfctl,
)

pytestmark = pytest.mark.testbed


def _inventory(testbed, tmp: Path, who: str) -> Path:  # type: ignore[no-untyped-def]
    fields = {h: {"workdir": f"{testbed.host(h).workdir}-{who}"} for h in ("h1", "h2")}
    (tmp / who).mkdir()
    return testbed.write_inventory(job_dir(tmp / who) / "cluster.yaml", FOREVER, hosts=["h1", "h2"],
                               host_fields=fields, name=f"lab{who}")


def _cluster(run_id: str) -> dict[str, Any]:
    """The cluster spec the run's processes were really given (their TF_CONFIG)."""
    configs = {json.dumps(json.loads(env["TF_CONFIG"])["cluster"], sort_keys=True)
               for env in processes_of_run(run_id).values() if "TF_CONFIG" in env}
    assert len(configs) == 1, configs  # every task of the run names the same cluster
    cluster: dict[str, Any] = json.loads(configs.pop())
    return cluster


def _ports_on(host_ports: list[str]) -> set[tuple[str, int]]:
    return {(hp.rsplit(":", 1)[0], int(hp.rsplit(":", 1)[1])) for hp in host_ports}


def test_two_runs_share_the_hosts_without_ports_written(testbed, tmp_path: Path,  # type: ignore[no-untyped-def]
                                                        up_run) -> None:
    first, second = _inventory(testbed, tmp_path, "a"), _inventory(testbed, tmp_path, "b")
    plan = json.loads(tfctl(second, "plan", "--json").stdout)
    assert plan["port_range"] == [2220, 2299]
    assert {t["port_chosen_at_up"] for t in plan["tasks"] if t["port"]} == {True}

    run_a = up_run(first).run_id
    used_a = {p for kind in _cluster(run_a).values() for p in _ports_on(kind)}
    assert all(2220 <= p <= 2299 for _a, p in used_a)  # 2222, 2223 where nothing else has them
    check = tfctl(second, "check", "-v")  # which free ports `up` would take now, with a's up
    assert check.returncode == 0, check.stdout + check.stderr
    for h in ("h1", "h2"):
        line = next(x for x in check.stdout.splitlines()
                    if f"{h}: ports chosen at up from 2220-2299; free now:" in x)
        free_now = {int(w.split()[-1]) for w in line.split("free now:")[1].split(",")}
        assert len(free_now) == 2 and not free_now & {p for a, p in used_a
                                                      if a == testbed.host(h).address}, line
    up_b = up_run(second)  # refused on a taken port before
    if (testbed.host("h1").address, 2222) in used_a:  # b's ps:0 would have taken 2222 on h1
        assert "ports taken elsewhere, chosen free: ps:0 2222→" in up_b.stderr, up_b.stderr
    run_b = up_b.run_id

    for inv, run_id in ((first, run_a), (second, run_b)):
        st = status_json(inv)
        assert st["run_id"] == run_id
        assert {t["name"]: t["state"] for t in st["tasks"]} == {
            "ps:0": "running", "ps:1": "running", "worker:0": "running", "worker:1": "running"}
    used_b = {p for kind in _cluster(run_b).values() for p in _ports_on(kind)}
    assert not used_a & used_b and all(2220 <= p <= 2299 for _a, p in used_b)
    # The run's manifest on the host records the ports it took, as its tasks listen on them.
    workdir_b = Path(f"{testbed.host('h1').workdir}-b")
    manifest = json.loads((workdir_b / ".tfctl" / "runs" / run_b / "manifest.json").read_text())
    recorded = {t["name"]: t["port"] for t in manifest["tasks"]}
    assert {(testbed.host("h1").address, p) for p in recorded.values()} <= used_b
    if testbed.isolated:
        listening = testbed.run("h1", "ss -Hltn").stdout
        for port in recorded.values():
            assert f":{port} " in listening, listening

    for inv, run_id in ((first, run_a), (second, run_b)):
        down = tfctl(inv, "down", "--grace", "1")
        assert down.returncode == 0, down.stdout + down.stderr
        assert processes_of_run(run_id) == {}


def test_a_written_port_stays_fixed_and_is_refused_when_taken(testbed, tmp_path: Path,  # type: ignore[no-untyped-def]
                                                              down_after, up_run) -> None:
    first = _inventory(testbed, tmp_path, "a")
    run_a = up_run(first).run_id
    taken = next(p for a, p in _ports_on(_cluster(run_a)["worker"])
                 if a == testbed.host("h1").address)  # run a's worker:0
    (tmp_path / "f").mkdir()
    fixed = testbed.write_inventory(job_dir(tmp_path / "f") / "cluster.yaml",
                                {**FOREVER, "ports": {"worker": taken}}, hosts=["h1", "h2"],
                                host_fields={h: {"workdir": f"{testbed.host(h).workdir}-f"}
                                             for h in ("h1", "h2")}, name="labf")
    down_after.append(fixed)
    refused = tfctl(fixed, "up")
    assert refused.returncode == 1
    err = [line for line in refused.stderr.splitlines() if line.startswith("error:")]
    assert len(err) == 1 and f"port {taken}" in err[0] and run_a in err[0], refused.stderr
    assert "Traceback" not in refused.stderr
