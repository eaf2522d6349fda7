"""remote/runs/listing.merge_runs: each host's view of its runs joined into one per run."""

from __future__ import annotations

from tfctl.remote.history.listing import merge_runs

WORKDIRS = {"h1": "~/lab", "h2": "/data/lab"}


def _raw(run_id: str, created: float, *, live: bool = False, finished: dict | None = None,  # type: ignore[type-arg]
         tasks: tuple[str, ...] = ("worker:0",)) -> dict:  # type: ignore[type-arg]
    return {"run_id": run_id, "created_at": created, "live": live, "tasks": list(tasks),
            "outputs": ["out"], "finished": finished}


def test_runs_are_joined_newest_first_with_how_they_ended() -> None:
    done = {"status": {"cause": "chief:0 ended", "exit_code": 0}, "finished_at": 160.0}
    by_host = {
        "h1": [_raw("r2", 200.0, live=True), _raw("r1", 100.0, finished=done, tasks=("ps:0",))],
        "h2": [_raw("r1", 101.0, finished={"status": {"cause": "chief:0 ended"},
                                            "finished_at": 150.0}, tasks=("chief:0",))],
    }
    r2, r1 = merge_runs(by_host, WORKDIRS)
    assert (r2.run_id, r2.live, r2.ended, r2.duration_s) == ("r2", True, None, None)
    assert r1.hosts == ["h1", "h2"] and r1.tasks == ["ps:0", "chief:0"]
    assert (r1.started_at, r1.finished_at, r1.duration_s) == (100.0, 160.0, 60.0)
    assert r1.ended == "exit 0: chief:0 ended" and r1.exit_code == 0
    assert r1.outputs == ["h1:~/lab/out", "h2:/data/lab/out"]


def test_a_run_that_was_stopped_says_so() -> None:
    (run,) = merge_runs({"h1": [_raw("r", 1.0)]}, WORKDIRS)
    assert run.ended == "stopped (tfctl down) or never finished" and not run.live


def test_an_aborted_run_says_so_and_why() -> None:
    """`up` rolled back (a failed start, or an interrupt whose words it records)."""
    hup = {"status": {"state": "aborted", "cause": "interrupted by SIGHUP: its terminal closed "
                      "before it was up"}, "finished_at": 5.0}
    (run, failed) = merge_runs({"h1": [_raw("r", 2.0, finished=hup),
                                       _raw("f", 1.0, finished={"status": {"state": "aborted"}})]},
                               WORKDIRS)
    assert run.ended == "aborted: interrupted by SIGHUP: its terminal closed before it was up"
    assert failed.ended == "aborted" and run.exit_code is None
