"""The ledger (remote/agent/ledger.py) and `tfctl usage`'s sums (remote/lab/usage.py), apart from
SSH: a run's watcher counting held and idle seconds from a real run folder, clock jumps, the
samplers' minutes counted once, other users' files read without trusting them (a file in
another user's name, a link), and the sums per user, host, GPU and day, with a host that did not
answer left out. The page of `usage --html` is written for real (matplotlib)."""

from __future__ import annotations

import json
import os
import pwd
import time
from pathlib import Path
from typing import Any

import pytest

from tfctl.remote.agent import ledger
from tfctl.remote.agent.proc import user_name
from tfctl.remote.agent.record import GpuRecorder
from tfctl.remote.agent.vocab import UsageAnswer
from tfctl.remote.lab.usage import host_rows, shares, summarize, totals, usage_csv, usage_json

ME = user_name(os.getuid()) or str(os.getuid())
NOBODY = 65534
HOUR = 498_777  # an epoch hour
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="chown to a second uid needs root")


@pytest.fixture
def claims_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "claims"
    monkeypatch.setenv("TFCTL_CLAIMS_DIR", str(folder))
    return folder


def _run_folder(tmp_path: Path, masks: dict[str, str]) -> Path:
    run_dir = tmp_path / "run"
    (run_dir / "tasks").mkdir(parents=True)
    tasks = [{"name": name, "type": "worker", "cuda_visible_devices": mask}
             for name, mask in masks.items()]
    (run_dir / "manifest.json").write_text(json.dumps({"inventory": "lab", "tasks": tasks}))
    (run_dir / "gpus.json").write_text(json.dumps({"gpus": [
        {"index": 0, "uuid": "GPU-a", "name": "A"}, {"index": 1, "uuid": "GPU-b", "name": "B"},
        {"index": 2, "uuid": "GPU-c", "name": "C"}]}))
    return run_dir


def _recorder(run_dir: Path, started_s: float) -> GpuRecorder:
    """The run's recorder (not started: the test writes its gpu.csv), begun at `started_s`."""
    recorder = GpuRecorder(str(run_dir), "20261129-010203-ab12")
    recorder.started = started_s
    return recorder


def _task_file(run_dir: Path, name: str, suffix: str) -> Path:
    from tfctl.remote.agent.rundir import task_file

    return Path(task_file(str(run_dir), name, suffix))


def test_a_run_counts_its_held_gpus_idle_where_the_samples_say_so(
        tmp_path: Path, claims_dir: Path) -> None:
    run_dir = _run_folder(tmp_path, {"worker:0": "0,1", "worker:1": "2"})
    manifest = json.loads((run_dir / "manifest.json").read_text())
    wall = HOUR * 3600.0 + 100
    book = ledger.RunLedger(str(run_dir), "20261129-010203-ab12", manifest,
                            _recorder(run_dir, wall - 10))
    _task_file(run_dir, "worker:0", ".pid.json").write_text("{}")  # started; worker:1 not yet
    # the recorder's samples, seconds since its start: GPU 0 idle (2 %), GPU 1 busy, no power
    (run_dir / "gpu.csv").write_text("10,0,2,100,40,50.5,0\n10,1,97,900,70,,0\n")
    book.last_tick = 1000.0
    book.tick(1004.0, wall)
    book.tick(1000.0, wall + 4)  # the monotonic clock never goes back; a wall jump adds nothing
    assert {k: g["hours"] for k, g in book.gpus.items() if g["hours"]} == {
        "0": {str(HOUR): [4.0, 4.0, 202.0, 4.0]}, "1": {str(HOUR): [4.0, 0.0, 0.0, 0.0]}}
    book.tick(1000.0 + 3 * 3600, wall + 9)  # a host suspended for hours: one step at most
    assert book.gpus["0"]["hours"][str(HOUR)][0] == 4.0 + ledger.LEDGER_MAX_STEP_S
    _task_file(run_dir, "worker:0", ".exit.json").write_text("{}")
    book.tick(1000.0 + 3 * 3600 + 5, wall + 14)  # ended: nothing more held
    assert book.gpus["0"]["hours"][str(HOUR)][0] == 4.0 + ledger.LEDGER_MAX_STEP_S
    assert book.gpus["2"]["hours"] == {}  # worker:1 never started: its GPU was never held
    book.write()

    records, warnings = ledger.ledger_read(0)
    assert warnings == []
    (record,) = records
    assert (record["user"], record["kind"], record["run_id"], record["job"]) == (
        ME, "run", "20261129-010203-ab12", "lab")
    rows = ledger.ledger_rows(records, HOUR * 3600.0, HOUR * 3600.0 + 3599)
    assert sorted((r["gpu"], r["index"], r["held_s"], r["idle_s"]) for r in rows) == [
        ("GPU-a", 0, 64.0, 4.0), ("GPU-b", 1, 64.0, 0.0)]  # later: no fresh sample
    assert ledger.ledger_rows(records, (HOUR + 1) * 3600.0, (HOUR + 2) * 3600.0) == []
    assert (claims_dir / "ledger" / f"{ME}.run.20261129-010203-ab12.json").exists()

    again = ledger.RunLedger(str(run_dir), "20261129-010203-ab12", manifest,
                             _recorder(run_dir, wall))
    assert again.gpus["0"]["hours"] == {str(HOUR): [64.0, 4.0, 202.0, 4.0]}  # goes on from it
    cpu_only = ledger.RunLedger(str(run_dir), "20261129-010203-cccc", {"tasks": []},
                                _recorder(run_dir, wall))
    cpu_only.tick(5.0, wall)
    cpu_only.write()  # held no GPU: leaves no file
    assert not list((claims_dir / "ledger").glob("*cccc*"))


def test_the_runs_recorder_notes_processes_tfctl_did_not_start(tmp_path: Path,
                                                               claims_dir: Path) -> None:
    run_dir = _run_folder(tmp_path, {"worker:0": "0"})
    recorder = _recorder(run_dir, time.time() - 20)
    book = ledger.RunLedger(str(run_dir), "20261129-010203-ab12", {"tasks": []}, recorder)
    assert recorder.on_owners == book.saw_owners  # called after each look at the owners
    (run_dir / "gpu.csv").write_text("19,0,1,100,40,80.0,0\n")  # GPU 0 at 1 %, 80 W
    book._read_samples()
    me = os.getpid()  # a process of no tfctl run, on GPU 0
    book.saw_owners(time.time(), {"GPU-a": "0"}, [["GPU-a", str(me), "1500"]])
    (path,) = (claims_dir / "ledger").glob(f"{ME}.seen.*-w*.json")
    (proc,) = json.loads(path.read_text())["procs"].values()
    assert (proc["uid"], proc["index"]) == (os.getuid(), 0)
    assert list(proc["minutes"].values()) == [[1, 1, 80.0, 1]]


def test_negative_or_impossible_amounts_are_clamped() -> None:
    hours = ledger.ledger_hours({"1": [-50, -3, -1, -2], "2": [9000, 9999, 5, 100],
                                 "3": [10, 30, True, "x"]})
    assert hours == {1: [0.0, 0.0, 0.0, 0.0], 2: [3600.0, 3600.0, 5.0, 100.0],
                     3: [10.0, 10.0, 0.0, 0.0]}
    with pytest.raises(ValueError):
        ledger.ledger_hours({"-4": [1, 1]})


def _seen(name: str, uid: int, procs: dict[str, dict[int, list[float]]]) -> dict[str, Any]:
    raw = {"format": ledger.LEDGER_FORMAT, "kind": "seen", "procs": {
        key: {"uid": uid, "index": 1, "command": "python nb.py",
              "minutes": {str(m): c for m, c in minutes.items()}}
        for key, minutes in procs.items()}}
    return dict(ledger.ledger_parse(raw, "seen"), file=name, user="whoever")


def test_two_samplers_of_the_same_minute_count_it_once() -> None:
    minute = HOUR * 60 + 5
    alices = _seen("a.seen.x.json", NOBODY, {"GPU-b 77": {minute: [6, 6, 600.0, 6],
                                                          minute + 1: [3, 0, 300.0, 3]}})
    bobs = _seen("b.seen.y.json", NOBODY, {"GPU-b 77": {minute + 1: [6, 6, 540.0, 6],
                                                        minute + 2: [2, 1, 0.0, 0]}})
    rows = ledger.ledger_rows([alices, bobs], HOUR * 3600.0, HOUR * 3600.0 + 3599)
    (row,) = rows
    owner = user_name(NOBODY)
    assert (row["user"], row["kind"], row["id"], row["gpu"], row["index"]) == (
        owner, "other", "pid 77", "GPU-b", 1)
    assert row["held_s"] == 180.0  # three minutes, not four: minute+1 seen by both counts once
    assert row["idle_s"] == 60 + 60 + 30  # bob's look at minute+1 (more samples) is kept
    assert row["energy_j"] == pytest.approx(100 * 60 + 90 * 60)
    assert row["power_s"] == 120.0
    # two processes on one board in one minute share its power
    both = _seen("c.seen.z.json", 0, {"GPU-b 77": {minute: [1, 0, 200.0, 1]},
                                      "GPU-b 78": {minute: [1, 0, 200.0, 1]}})
    energy = sorted(r["energy_j"] for r in ledger.ledger_rows([both], 0, 1e12))
    assert energy == [6000.0, 6000.0]


def test_the_sampler_notes_only_what_tfctl_did_not_start(claims_dir: Path) -> None:
    seen = ledger.SeenLedger("abc")
    t = HOUR * 3600.0 + 30
    gpus = [{"index": 0, "uuid": "GPU-a", "utilization_pct": 1.0, "power_w": 60.0},
            {"index": 1, "uuid": "GPU-b", "utilization_pct": 95.0, "power_w": None}]
    apps = [{"gpu_uuid": "GPU-a", "pid": 11}, {"gpu_uuid": "GPU-b", "pid": 12},
            {"gpu_uuid": "GPU-b", "pid": 13}]
    seen.note(t, gpus, apps, {11: NOBODY, 12: 0})  # 13: a run's task
    seen.note(t + 10, gpus, apps, {11: NOBODY, 12: 0})
    day = time.strftime("%Y%m%d", time.gmtime(t))
    path = claims_dir / "ledger" / f"{ME}.seen.{day}-abc.json"
    procs = json.loads(path.read_text())["procs"]
    assert set(procs) == {"GPU-a 11", "GPU-b 12"}
    assert procs["GPU-a 11"]["minutes"] == {str(int(t // 60)): [2, 2, 120.0, 2]}
    assert procs["GPU-b 12"]["minutes"] == {str(int(t // 60)): [2, 0, 0.0, 0]}
    again = ledger.SeenLedger("abc")  # a sampler started again goes on with its day's file
    again.note(t + 20, gpus, apps, {11: NOBODY})
    procs = json.loads(path.read_text())["procs"]
    assert procs["GPU-a 11"]["minutes"][str(int(t // 60))] == [3, 3, 180.0, 3]


@needs_root
def test_a_file_in_another_users_name_or_a_link_is_skipped(claims_dir: Path,
                                                          tmp_path: Path) -> None:
    run_dir = _run_folder(tmp_path, {})
    book = ledger.RunLedger(str(run_dir), "20261129-010203-ab12", {"tasks": []},
                            _recorder(run_dir, 0.0))
    book.gpus = {"0": {"index": 0, "uuid": "GPU-a", "name": "A",
                       "hours": {str(HOUR): [100.0, 0.0, 0.0, 0.0]}}}
    book.write()
    folder = claims_dir / "ledger"
    mine = folder / f"{ME}.run.20261129-010203-ab12.json"
    nobody = pwd.getpwuid(NOBODY).pw_name
    forged = folder / f"{ME}.run.20261129-999999-ffff.json"  # written by nobody, in my name
    forged.write_text(mine.read_text().replace("100.0", "3000.0"))
    os.chown(forged, NOBODY, NOBODY)
    (folder / f"{ME}.run.link.json").symlink_to(mine)
    records, warnings = ledger.ledger_read(0)
    assert [r["file"] for r in records] == [mine.name]
    forged_words, link_words = warnings  # one line per offending owner
    assert f"skipped {forged.name} of user {nobody}: named after user {ME}" in forged_words
    assert link_words.endswith(f"skipped {ME}.run.link.json of user {ME}: a symbolic link (not "
                               "followed)")
    old = time.time() - 30 * 86400  # a file last written before the window is not opened
    os.utime(mine, (old, old))
    assert ledger.ledger_read(time.time() - 86400)[0] == []
    ancient = time.time() - ledger.LEDGER_KEEP_S - 60  # kept a year and more, then swept
    for path in (mine, forged):
        os.utime(path, (ancient, ancient), follow_symlinks=False)
    assert ledger.ledger_sweep_own(time.time()) == [mine.name]  # never another owner's file
    assert forged.exists()


# ---------------------------------------------------------------- the sums (client side)

def _answer(*rows: dict[str, Any]) -> UsageAnswer:
    base = {"kind": "run", "id": "r1", "job": "lab", "gpu": "GPU-a", "index": 0, "hour": HOUR,
            "held_s": 3600.0, "idle_s": 0.0, "energy_j": 0.0, "power_s": 0.0}
    return UsageAnswer(tuple(dict(base, **r) for r in rows), (), 0.0, 5.0)


def test_usage_sums_per_user_host_gpu_and_day_and_leaves_silent_hosts_out() -> None:
    answers = {
        "h1": _answer({"user": "alice", "idle_s": 900.0, "energy_j": 3600.0 * 200,
                       "power_s": 3600.0},
                      {"user": "alice", "hour": HOUR + 30, "gpu": "GPU-b", "index": 1,
                       "held_s": 1800.0},
                      {"user": "bob", "kind": "other", "id": "pid 7", "held_s": 600.0,
                       "idle_s": 600.0}),
        "h2": _answer({"user": "bob", "kind": "session", "held_s": 1200.0, "power_s": 600.0,
                       "energy_j": 600.0 * 100}, {"user": "x", "held_s": "bad"})}
    by_user = summarize(answers, {"h3": "h3 unreachable: timed out"}, ["h1", "h2", "h3"],
                        0.0, 1e12, "user")
    alice, bob = by_user.totals
    assert (alice.key, alice.held_s, alice.idle_s, alice.energy_wh) == ("alice", 5400.0, 900.0,
                                                                       200.0)
    assert alice.idle_share == pytest.approx(900 / 5400) and alice.energy_partial
    assert (bob.key, bob.held_s, bob.by_kind) == ("bob", 1800.0,
                                                  {"run": 0.0, "session": 1200.0, "other": 600.0})
    assert by_user.answered == ("h1", "h2")
    assert by_user.unanswered == {"h3": "h3 unreachable: timed out"}  # named, not zero
    printed = usage_json(by_user)
    assert [g["key"] for g in printed["groups"]] == ["alice", "bob"]
    assert printed["groups"][0]["gpu_seconds"] == 5400.0
    assert printed["unanswered"] == {"h3": "h3 unreachable: timed out"}
    assert "h3" not in printed["hosts"]
    assert usage_csv(by_user).splitlines()[1].startswith("alice,5400.0,1.5000,900.0,")

    rows = [r for h, a in answers.items() for r in host_rows(h, a)]
    assert [(t.key, t.held_s) for t in totals(rows, "host")] == [("h1", 6000.0),
                                                                ("h2", 1200.0)]
    assert [(t.key, t.held_s) for t in totals(rows, "gpu")] == [
        ("h1:0", 4200.0), ("h1:1", 1800.0), ("h2:0", 1200.0)]
    days = totals(rows, "day")
    assert sum(t.held_s for t in days) == 7200.0 and len(days) == 2  # 30 h apart: two days
    assert totals([], "user") == []


def test_each_users_share_of_the_week_is_over_every_host() -> None:
    assert shares([{"alice": [300.0, 0.0], "bob": [100.0, 50.0]}, {"alice": [600.0, 0.0]}]) == {
        "alice": 0.9, "bob": 0.1}
    assert shares([{}, {"alice": [0.0, 0.0]}]) == {}


def test_the_page_has_a_chart_per_user_and_per_host(tmp_path: Path) -> None:
    from tfctl.tui.report.usage import write_usage_page

    answers = {"h1": _answer({"user": "alice"}, {"user": "bob", "held_s": 60.0}),
               "h2": _answer({"user": "alice", "idle_s": 1800.0})}
    usage = summarize(answers, {"h3": "no answer"}, ["h1", "h2", "h3"], 0.0, 1e9, "user")
    written = write_usage_page(usage, str(tmp_path / "page"))
    names = sorted(Path(p).name for p in written.pngs)
    assert names == ["host-h1.png", "host-h2.png", "user-alice.png", "user-bob.png"]
    for png in written.pngs:
        assert Path(png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    page = Path(written.page).read_text()
    for caption in ("user alice: GPU-hours per day", "user bob: GPU-hours per day",
                    "host h1: GPU-hours per user", "host h2: GPU-hours per user"):
        assert f'<img alt="{caption}" src="data:image/png;base64,' in page
    assert "h3: no answer" in page and "not counted" in page


def test_the_idle_threshold_is_the_lab_policys_where_the_host_has_one(
        claims_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """usage's idle share and the policy's idle clock use one threshold: the policy's."""
    claims_dir.mkdir()
    policy = tmp_path / "lab.yaml"
    monkeypatch.setenv("TFCTL_LAB_POLICY", str(policy))
    monkeypatch.setattr(ledger, "_policy_pct_read", [-ledger.LEDGER_POLICY_REREAD_S, 5.0])
    assert ledger.ledger_idle_pct() == ledger.LEDGER_IDLE_UTIL_PCT  # no file: the default
    policy.write_text("idle: {below_util_pct: 30, warn_after: 1h, stop_after: 3h}\n")
    policy.chmod(0o644)
    monkeypatch.setattr(ledger, "_policy_pct_read", [-ledger.LEDGER_POLICY_REREAD_S, 5.0])
    assert ledger.ledger_idle_pct() == 30.0
    policy.write_text("idle: {below_util_pct: 70, warn_after: 1h, stop_after: 3h}\n")
    assert ledger.ledger_idle_pct() == 30.0  # kept until LEDGER_POLICY_REREAD_S has passed
