"""The lab policy (remote/agent/policy.py): its YAML subset and keys, table-tested as pure
functions; the file's trust rule on this machine's real filesystem (a foreign owner, a link, a
file anyone may write, the claims folder's owner); and the idle rule applied by a run's watcher
(remote/agent/idlewatch.py) to a real run directory, from samples as the recorder keeps them."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from tfctl.remote.agent import policy
from tfctl.remote.agent.idlewatch import IDLE_FILE, IdleWatch, clock_words, run_gpus
from tfctl.remote.agent.policy import PolicyError, parse_duration, parse_policy, read_policy
from tfctl.remote.agent.record import EventLog
from tfctl.remote.lab.policy import HostPolicy, disagreeing, disagreement_words

NOBODY = 65534
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="chown to another uid needs root")
SECONDS = "idle: {below_util_pct: 5, warn_after: 5s, stop_after: 15s, applies_to: [runs]}\n"


@pytest.mark.parametrize(("text", "seconds"), [
    ("5s", 5), ("15s", 15), ("1h", 3600), ("3h", 10800), ("1h30m", 5400), ("90m", 5400),
    ("2d", 172800), ("1d12h", 129600), (" 45s ", 45)])
def test_durations(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds
    assert parse_duration(policy.duration_words(seconds)) == seconds


@pytest.mark.parametrize("text", ["", "5", "h", "1.5h", "5 s", "30s1m", "-5s", "1w"])
def test_not_durations(text: str) -> None:
    with pytest.raises(ValueError, match="is not a duration"):
        parse_duration(text)


IDLE = {"below_util_pct": 5.0, "warn_after_s": 3600.0, "stop_after_s": 10800.0,
        "applies_to": ["sessions", "runs"]}


@pytest.mark.parametrize(("text", "expected"), [
    ("idle: {below_util_pct: 5, warn_after: 1h, stop_after: 3h, applies_to: [sessions, runs]}",
     {"idle": IDLE}),
    ("# the lab's rules, by the admins\n---\nidle:   # GPUs held and unused\n"
     "  below_util_pct: 5\n  warn_after: 1h   # then the owner is told\n"
     "  stop_after: '3h'\n  applies_to:\n    - runs\n    - sessions\n", {"idle": IDLE}),
    ("idle: {below_util_pct: 5,\n       warn_after: 1h, stop_after: 3h,\n"
     "       applies_to: [runs, sessions]}\n", {"idle": IDLE}),
    ("idle:\n  below_util_pct: 2.5\n  warn_after: 5s\n  stop_after: 15s\n",
     {"idle": {"below_util_pct": 2.5, "warn_after_s": 5.0, "stop_after_s": 15.0,
               "applies_to": ["sessions"]}}),
    ("idle: {below_util_pct: 5, warn_after: 1h, stop_after: 1h, applies_to: runs}",
     {"idle": dict(IDLE, stop_after_s=3600.0, applies_to=["runs"])}),
    ("", {}), ("# nothing yet\n\n", {}),
])
def test_policies(text: str, expected: dict[str, object]) -> None:
    assert parse_policy(text) == expected


@pytest.mark.parametrize(("text", "line", "why"), [
    ("idle: {below_util_pct: 5, warn_after: 1h}\n", 1, "idle.stop_after is missing"),
    ("idle:\n  below_util_pct: 5\n\twarn_after: 1h\n", 3, "a tab in the indentation"),
    ("idle:\n  below_util_pct: five\n  warn_after: 1h\n  stop_after: 3h\n", 2,
     "below_util_pct must be a number"),
    ("idle: {below_util_pct: 0, warn_after: 1h, stop_after: 3h}", 1, "must be a number over 0"),
    ("# comment\nidel: {below_util_pct: 5}\n", 2, "unknown key idel"),
    ("idle:\n  below_util_pct: 5\n  warn_after: 1h\n  stop_after: 3h\n  kill: yes\n", 5,
     "unknown key idle.kill"),
    ("idle: {below_util_pct: 5, warn_after: 1h, stop_after: 3h, applies_to: [jobs]}", 1,
     "applies_to must list sessions, runs or both"),
    ("idle: {below_util_pct: 5, warn_after: 1h, stop_after: 3h\n", 1, "never closed"),
    ("idle: {below_util_pct: 5, warn_after: 2h, stop_after: 1h}", 1,
     "stop_after must not come before"),
    ("idle:\n  below_util_pct: 5\n  warn_after: an hour\n  stop_after: 3h\n", 3,
     "'an hour' is not a duration"),
    ("idle: 1\nidle: 2\n", 2, "key idle is given twice"),
    ("- idle\n", 1, "must be a mapping"),
    ("idle: &rule {below_util_pct: 5}\n", 1, "anchors, aliases, tags"),
    ("idle:\n  below_util_pct: 5\n    warn_after: 1h\n", 3, "unexpected indentation"),
    ("idle: {below_util_pct: 5} trailing\n", 1, "after the value"),
    ("idle: |\n  text\n", 1, "block strings"),
    ("idle\n", 1, "expected `key: value`"),
    ("idle: {}\n---\nidle: {}\n", 2, "one document only"),
])
def test_malformed_policies_name_the_line_and_why(text: str, line: int, why: str) -> None:
    with pytest.raises(PolicyError) as caught:
        parse_policy(text)
    assert (caught.value.line, why in caught.value.why) == (line, True), caught.value.why


def test_policy_words() -> None:
    assert policy.policy_words(parse_policy(SECONDS)) == (
        "idle: under 5 % for 5s → owner warned, 15s → stopped (runs)")
    assert policy.policy_words({}) == "no rules"


def _claims_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "claims"
    folder.mkdir(mode=0o700)
    folder.chmod(0o1777)
    return folder


def test_no_file_is_no_policy(tmp_path: Path) -> None:
    reading = read_policy(str(tmp_path / "lab.yaml"), str(_claims_folder(tmp_path)))
    assert reading == {"path": str(tmp_path / "lab.yaml"), "found": False, "policy": None,
                       "ignored": None, "owner": None}


def test_the_default_path_and_the_hosts_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(policy.POLICY_VAR, raising=False)
    assert policy.policy_path() == "/etc/tfctl/lab.yaml"
    monkeypatch.setenv(policy.POLICY_VAR, "/srv/lab/policy.yaml")
    assert policy.policy_path() == "/srv/lab/policy.yaml"


def test_a_file_of_the_claims_folders_owner_is_trusted(tmp_path: Path) -> None:
    path = tmp_path / "lab.yaml"
    path.write_text(SECONDS)
    path.chmod(0o644)
    reading = read_policy(str(path), str(_claims_folder(tmp_path)))
    assert (reading["ignored"], reading["policy"]) == (None, parse_policy(SECONDS))


@needs_root
def test_the_etc_trust_rule_root_yes_another_user_no(tmp_path: Path) -> None:
    """As /etc/tfctl/lab.yaml would be: root's file is the policy; another user's is ignored,
    even where that user could have written a stricter one; so is a link to root's file."""
    folder = _claims_folder(tmp_path)
    os.chown(folder, NOBODY, NOBODY)  # the claims folder is someone else's: only root counts
    path = tmp_path / "lab.yaml"
    path.write_text(SECONDS)
    os.chown(path, 0, 0)
    assert read_policy(str(path), str(folder))["policy"] == parse_policy(SECONDS)
    os.chown(path, 1234, 1234)
    reading = read_policy(str(path), str(folder))
    assert reading["policy"] is None
    assert reading["ignored"] == (f"the lab policy {path} is ignored: it is owned by 1234, not "
                                  "by root or the claims folder's owner")
    os.chown(path, 0, 0)
    link = tmp_path / "link.yaml"
    link.symlink_to(path)
    assert read_policy(str(link), str(folder))["ignored"] == (
        f"the lab policy {link} is ignored: it is a symbolic link (not followed)")
    os.chown(folder, 0, 0)
    os.chown(path, NOBODY, NOBODY)  # the claims folder's owner now: root; nobody's file: no
    assert read_policy(str(path), str(folder))["policy"] is None


def test_a_file_anyone_may_write_is_ignored(tmp_path: Path) -> None:
    path = tmp_path / "lab.yaml"
    path.write_text(SECONDS)
    path.chmod(0o666)
    reading = read_policy(str(path), str(_claims_folder(tmp_path)))
    assert reading["policy"] is None
    assert reading["ignored"] == (f"the lab policy {path} is ignored: anyone may write it (mode "
                                  "666; make it writable by its owner only)")


def test_a_malformed_file_is_ignored_in_one_sentence(tmp_path: Path) -> None:
    path = tmp_path / "lab.yaml"
    path.write_text("idle:\n  below_util_pct: 5\n  warn_after: soon\n  stop_after: 3h\n")
    reading = read_policy(str(path), str(_claims_folder(tmp_path)))
    assert reading["policy"] is None
    assert reading["ignored"] == (f"the lab policy {path} is ignored: line 3: idle.warn_after: "
                                  "'soon' is not a duration (write e.g. 45s, 30m, 1h30m, 2d)")
    path.write_bytes(b"idle: \xff\n")
    assert read_policy(str(path), str(tmp_path / "claims"))["ignored"].endswith(
        "is ignored: it is not UTF-8 text")
    path.write_text("#" * (policy.MAX_POLICY_BYTES + 1))
    assert read_policy(str(path), str(tmp_path / "claims"))["ignored"].endswith(
        f"is ignored: it is over {policy.MAX_POLICY_BYTES} bytes")


@pytest.mark.parametrize(("manifest", "kind", "rules"), [
    ({"tasks": [{"name": "worker:0"}]}, "", {"runs": True, "sessions": False}),
    ({"session": "shell", "tasks": [{"name": "worker:0"}]}, "shell",
     {"runs": False, "sessions": True}),
    ({"tasks": [{"name": "worker:0", "session": "notebook"}]}, "notebook",
     {"runs": False, "sessions": True}),
    ({"session": "", "tasks": [{"name": "worker:0", "session": ""}]}, "",
     {"runs": True, "sessions": False}),
])
def test_which_runs_a_rule_applies_to(manifest: dict[str, object], kind: str,
                                      rules: dict[str, bool]) -> None:
    assert policy.session_kind(manifest) == kind
    for applies, wanted in rules.items():
        found = policy.idle_rule_for(parse_policy(SECONDS.replace("[runs]", f"[{applies}]")),
                                     manifest)
        assert (found is not None) == wanted
    assert policy.idle_rule_for(None, manifest) is None
    assert policy.idle_rule_for({}, manifest) is None


def test_hosts_that_disagree_are_named() -> None:
    rule = parse_policy(SECONDS)
    hosts = [HostPolicy("h1", "/etc/tfctl/lab.yaml", True, rule),
             HostPolicy("h2", "/etc/tfctl/lab.yaml", False, None),
             HostPolicy("h3", "/etc/tfctl/lab.yaml", True, rule),
             HostPolicy("h4", error="h4: unreachable")]
    assert [h.host for h in disagreeing(hosts)] == ["h2"]
    assert disagreement_words(hosts) == [
        "h2 disagrees with h1, h3: it has none (no policy file); they have idle: under 5 % for "
        "5s → owner warned, 15s → stopped (runs)"]
    assert disagreeing(hosts[:1] + hosts[2:]) == []


# ---------------------------------------------------------------- the watcher's idle clock

def _run_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str,
             session: str = "") -> tuple[Path, dict[str, object]]:
    """A run directory of one task on GPU 1, and the policy `text` in force."""
    path = tmp_path / "lab.yaml"
    path.write_text(text)
    monkeypatch.setenv(policy.POLICY_VAR, str(path))
    monkeypatch.setenv("TFCTL_CLAIMS_DIR", str(_claims_folder(tmp_path)))
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    manifest: dict[str, object] = {"run_id": "R1", "host": "h1", "session": session,
                                   "tasks": [{"name": "worker:0", "type": "worker",
                                              "env": {"CUDA_VISIBLE_DEVICES": "1"}}]}
    (run_dir / "manifest.json").write_text(json.dumps(manifest))
    return run_dir, manifest


def _events(run_dir: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]


def test_an_idle_run_is_warned_then_stopped(tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    run_dir, manifest = _run_dir(tmp_path, monkeypatch, SECONDS)
    watch = IdleWatch(str(run_dir), "R1", manifest, EventLog(str(run_dir), ["worker:0"]))
    t0 = time.time()
    assert run_gpus(manifest) == [1]
    for dt in (0, 2, 4):
        assert not watch.tick({"1": (t0 + dt, "0"), "0": (t0 + dt, "99")}, {}, t0 + dt)
    assert not (run_dir / IDLE_FILE).exists()
    assert not watch.tick({"1": (t0 + 6, "3")}, {}, t0 + 6)  # 3 % is under 5 %
    warned = json.loads((run_dir / IDLE_FILE).read_text())
    assert (warned["since"], warned["stop_at"], warned["gpus"]) == (t0, t0 + 15, [1])
    assert [e["event"] for e in _events(run_dir)] == ["policy", "idle_warning"]
    assert _events(run_dir)[1]["cause"].startswith(
        "idle: GPU 1 under 5 % for 0:00:06 — stops at ")
    assert watch.tick({"1": (t0 + 15, "0")}, {}, t0 + 15)
    watch.stop(["worker:0"], t0 + 15)
    finished = json.loads((run_dir / "finished.json").read_text())
    assert finished["status"]["cause"] == (
        "stopped as idle by the lab's policy: GPU 1 under 5 % for 0:00:15")
    assert finished["status"]["state"] == "stopped" and not (run_dir / IDLE_FILE).exists()


def test_use_activity_and_missing_samples_restart_the_idle_clock(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run_dir, manifest = _run_dir(tmp_path, monkeypatch, SECONDS.replace("[runs]", "[sessions]"),
                                 session="shell")
    watch = IdleWatch(str(run_dir), "R1", manifest, EventLog(str(run_dir), ["worker:0"]))
    t0 = time.time()
    watch.tick({"1": (t0, "0")}, {}, t0)
    watch.tick({"1": (t0 + 6, "0")}, {}, t0 + 6)
    assert (run_dir / IDLE_FILE).exists()
    assert not watch.tick({"1": (t0 + 7, "50")}, {}, t0 + 7)  # used: the clock restarts
    assert not (run_dir / IDLE_FILE).exists() and watch.since is None
    watch.tick({"1": (t0 + 8, "0")}, {}, t0 + 8)
    activity = run_dir / "activity"  # a keystroke at t0 + 20
    activity.touch()
    os.utime(activity, (t0 + 20, t0 + 20))
    assert not watch.tick({"1": (t0 + 22, "0")}, {}, t0 + 22)
    assert watch.since == t0 + 20
    assert not watch.tick({"1": (t0 + 30, "0")}, {}, t0 + 30)  # 10 s idle: warned, not stopped
    assert not watch.tick({"1": (t0 + 20, "0")}, {}, t0 + 36)  # a stale sample says nothing
    assert watch.since is None
    assert [e["event"] for e in _events(run_dir)] == [
        "policy", "idle_warning", "active", "idle_warning", "active"]


def test_a_rule_that_does_not_apply_measures_nothing(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    run_dir, manifest = _run_dir(tmp_path, monkeypatch, SECONDS.replace("[runs]", "[sessions]"))
    watch = IdleWatch(str(run_dir), "R1", manifest, EventLog(str(run_dir), ["worker:0"]))
    t0 = time.time()
    assert not any(watch.tick({"1": (t0 + dt, "0")}, {}, t0 + dt) for dt in range(0, 60, 5))
    assert not (run_dir / IDLE_FILE).exists() and watch.rule is None


def test_an_ignored_policy_is_said_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    run_dir, manifest = _run_dir(tmp_path, monkeypatch, "idle: {below_util_pct: 5}\n")
    watch = IdleWatch(str(run_dir), "R1", manifest, EventLog(str(run_dir), ["worker:0"]))
    t0 = time.time()
    for dt in range(0, 60, 5):  # looked at again every 10 s: said the first time only
        assert not watch.tick({"1": (t0 + dt, "0")}, {}, t0 + dt)
    said = f"the lab policy {tmp_path / 'lab.yaml'} is ignored: line 1: idle.warn_after is missing"
    assert capsys.readouterr().out == said + "\n"
    assert [e.get("why") for e in _events(run_dir) if e["event"] == "policy_ignored"] == [said]


def test_idle_clock_words() -> None:
    assert [clock_words(s) for s in (15, 65 * 60, 3 * 3600 + 59)] == ["0:00:15", "1:05", "3:00"]


def test_status_and_the_dashboard_say_when_a_warned_run_stops(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The host's `idle.json` as `status` answers it: one line for `tfctl status`, and a finding
    for the dashboard, which the owners' read (every few seconds) keeps."""
    from tfctl.remote.gpus import owners as owners_module
    from tfctl.remote.gpus.findings import policy_idle_findings
    from tfctl.remote.gpus.owners import OwnerCache
    from tfctl.remote.lab.idle import idle_words

    now = 1_800_000_000.0
    state = {"since": now - 3900, "stop_at": now + 3600, "gpus": [1], "below_util_pct": 5.0}
    stops = time.strftime("%H:%M", time.localtime(now + 3600))
    words = f"idle 1:05 on h1 (GPU 1 under 5 %) — stops at {stops} by the lab's policy"
    assert idle_words("h1", state, now) == words
    (finding,) = policy_idle_findings({"h1": state}, now)
    assert (finding.level, finding.host, finding.kind, finding.text) == (
        "warning", "h1", "policy_idle", words)
    monkeypatch.setattr(owners_module, "read_run_hosts",
                        lambda fleet, run_id, hosts: ((), {}, (), {"h1": state}))
    monkeypatch.setattr(owners_module, "process_users", lambda fleet, pids: {})
    cache = OwnerCache(fleet=None, snapshots=dict)  # type: ignore[arg-type]
    cache.refresh("r1", ["h1"])
    assert cache.idle == {"h1": state}
