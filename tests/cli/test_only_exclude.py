"""`tfctl up --only/--exclude`: a run on part of the lab, without editing the file.

The selection itself is pure (`tfctl.inventory.subset`, tests/unit/test_inventory_subset.py); here
the command line runs for real on `transport: local` hosts: the run uses only the hosts kept
(nothing is even synced to the others), `status` reads only them, and `down` stops exactly what
was started. Names that are not hosts, or a selection of no host, are usage errors (exit 2)
that name the inventory's hosts.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.inventories import PS_JOB
from tests.support.localcluster import local_cluster, run_tfctl
from tests.support.testbedtools import processes_of_run
from tfctl.remote.runs.current import state_file


@pytest.mark.parametrize(("args", "words"), [
    (("--only", "h9"), ["'--only'", "'h9' is not a host of", "its hosts are h1, h2, h3"]),
    (("--exclude", "h2,nope,h7"), ["'--exclude'", "'nope', 'h7' are not hosts of"]),
    (("--exclude", "h1,h2", "--exclude", "h3"), ["leaves no host", "its hosts are h1, h2, h3"]),
    (("--only", "h1", "--exclude", "h1"), ["leaves no host"]),
])
def test_bad_selections_are_usage_errors_naming_the_hosts(tmp_path: Path, args: tuple[str, ...],
                                                          words: list[str]) -> None:
    inv = tmp_path / "lab.yaml"
    inv.write_text(PS_JOB)
    proc = run_tfctl(inv, "up", *args)  # refused before any host is contacted
    assert proc.returncode == 2, proc.stderr
    for word in words:
        assert word in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not Path(state_file(str(inv), "loc")).exists()


def test_up_only_runs_there_and_down_stops_exactly_that(tmp_path: Path) -> None:
    inv = local_cluster(tmp_path, {"a": {"ps": 1}, "b": {"ps": 1}})
    up = run_tfctl(inv, "up", "--only", "b")
    assert up.returncode == 0, up.stdout + up.stderr
    run_id = up.stdout.split("run ", 1)[1].split()[0]
    try:
        assert not (tmp_path / "work-a").exists()  # not synced, not prepared, nothing there
        state = json.loads(Path(state_file(str(inv), "loc")).read_text())
        assert state["run_id"] == run_id and state["hosts"] == ["b"]
        status = json.loads(run_tfctl(inv, "status", "--json").stdout)
        assert {t["name"]: t["host"] for t in status["tasks"]} == {"ps:0": "b",
                                                                  "worker:0": "b"}
        tasks = {env["TFCTL_TASK"] for env in processes_of_run(run_id).values()}
        assert tasks == {"ps:0", "worker:0"}
    finally:
        down = run_tfctl(inv, "down", "--grace", "1")
    assert down.returncode == 0, down.stderr
    assert f"run {run_id}: stopped ps:0, worker:0" in down.stdout
    assert processes_of_run(run_id) == {}


def test_up_exclude_says_what_moved(tmp_path: Path) -> None:
    inv = local_cluster(tmp_path, {"a": {"ps": 1}, "b": {"ps": 0}},
                        job={"style": "tf_config", "chief": "a"})
    up = run_tfctl(inv, "up", "--exclude", "a", "--json")
    try:
        assert up.returncode == 0, up.stderr
        data = json.loads(up.stdout)
        assert data["hosts"] == ["b"] and data["left_out"] == ["a"]
        assert "tfctl: warning: chief:0 moves from a (left out) to b (--only/--exclude)" \
            in up.stderr
        assert {t["name"] for t in data["tasks"]} == {"worker:0", "chief:0"}
    finally:
        run_tfctl(inv, "down", "--grace", "1")


def test_host_names_complete_after_the_commas_typed(monkeypatch: pytest.MonkeyPatch) -> None:
    from click.shell_completion import CompletionItem, ShellComplete

    from tfctl.tui.cli import context
    from tfctl.tui.cli.main import main

    def complete_hosts(ctx: object, param: object, incomplete: str) -> list[CompletionItem]:
        return [CompletionItem(n) for n in ("h1", "h2", "h3") if n.startswith(incomplete)]

    monkeypatch.setattr(context, "complete_hosts", complete_hosts, raising=False)
    shell = ShellComplete(main, {}, "tfctl", "_TFCTL_COMPLETE")
    assert [c.value for c in shell.get_completions(["up", "--exclude"], "")] == ["h1", "h2", "h3"]
    assert [c.value for c in shell.get_completions(["up", "--only"], "h2,h")] == ["h2,h1",
                                                                                  "h2,h3"]


def test_restarting_a_task_finds_it_where_the_run_put_it(tmp_path: Path) -> None:
    """The dashboard's restart (whole inventory) on a run made with --only: worker:0 of that
    run is on b, though the whole inventory's plan puts a worker:0 on a."""
    from tfctl.inventory.load import load_inventory
    from tfctl.remote.controller import RunController

    inv = local_cluster(tmp_path, {"a": {"ps": 0}, "b": {"ps": 0}}, job={"style": "tf_config"})
    up = run_tfctl(inv, "up", "--only", "b", "--json")
    assert up.returncode == 0, up.stderr
    run_id = json.loads(up.stdout)["run_id"]
    try:
        with RunController(load_inventory(inv)) as controller:
            assert controller.plan.task("worker:0").host == "a"
            before = {t.name: t.pid for t in controller.host_status("b")}
            controller.restart_task("worker:0")
            after = {t.name: t.pid for t in controller.host_status("b")}
        assert set(after) == {"worker:0"} and after["worker:0"] != before["worker:0"]
        assert not (tmp_path / "work-a").exists()
    finally:
        run_tfctl(inv, "down", "--grace", "1")
    assert processes_of_run(run_id) == {}
