"""A host that cannot reach the chief, as `status`, `gpus` and the dashboard say it.

The run's watcher on the host records the silence (tests/testbed/test_watch_silence.py); the status
operation reports it as `silences`; the client turns it into one sentence and the --json facts.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from tfctl.inventory.model import Job
from tfctl.remote.connect.session.agentops import StatusAnswer
from tfctl.remote.gpus import owners as owners_module
from tfctl.remote.gpus.findings import silence_findings
from tfctl.remote.gpus.owners import OwnerCache
from tfctl.remote.runs.status import status_from
from tfctl.remote.silence import Silence, silences_from
from tfctl.tui.cli import output

# "since 09:42:10" is local time: the zone is pinned (tests/conftest.py `utc`).
pytestmark = pytest.mark.usefixtures("utc")

W = 1795340530.0  # 2026-11-22 09:42:10 UTC

RAW = {"task": "worker:0", "host": "h1", "address": "10.0.0.5", "port": 2223, "since": W,
       "why": "timed out", "window_s": 600.0}

WORDS = ("h2 cannot reach worker:0 on h1 (10.0.0.5:2223) since 09:42:10 (silent for 35 s: "
         "timed out); its tasks keep running until 09:52:10")


def test_a_silence_in_words_and_json() -> None:
    (silence,) = silences_from("h2", [RAW])
    assert silence.words(W + 35) == WORDS
    assert silence.to_json(W + 35) == {
        "host": "h2", "task": "worker:0", "task_host": "h1", "address": "10.0.0.5",
        "port": 2223, "since": "2026-11-22T09:42:10+00:00", "silent_s": 35, "why": "timed out",
        "window_s": 600.0, "ends_part_at": "2026-11-22T09:52:10+00:00"}
    bare = Silence("h2", "chief:0", W)
    assert bare.words(W + 1) == "h2 cannot reach chief:0 since 09:42:10 (silent for 1 s)"


@pytest.mark.parametrize("raw", [
    {"host": "h1", "since": W},  # no task
    {"task": "chief:0"},  # no since
    {"task": "chief:0", "since": "yesterday"},
    {"task": "chief:0", "since": W, "port": "many"},
    "chief:0",
])
def test_a_malformed_entry_is_skipped(raw: Any) -> None:
    assert silences_from("h2", [raw, RAW]) == silences_from("h2", [RAW])


def _answers() -> dict[str, StatusAnswer]:
    return {"h1": StatusAnswer("r1", "/w/r1", ({"name": "worker:0", "state": "running"},)),
            "h2": StatusAnswer("r1", "/w/r1", ({"name": "ps:1", "state": "running"},),
                               silences=(RAW,))}


def test_status_carries_the_silence_and_prints_it(monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    st = status_from(Job(script="t.py", style="flags"), "r1", _answers(), {}, W)
    assert st.silences == silences_from("h2", [RAW])
    assert {t.name: t.state for t in st.tasks} == {"ps:1": "running", "worker:0": "running"}
    assert not st.job_ended  # silence is no end
    monkeypatch.setattr(output, "time", SimpleNamespace(time=lambda: W + 35))
    output.status_table(st)
    assert WORDS in capsys.readouterr().out.replace("\n", " ").replace("  ", " ")


def test_gpus_and_the_dashboard_get_it_as_a_finding(monkeypatch: pytest.MonkeyPatch) -> None:
    (finding,) = silence_findings(silences_from("h2", [RAW]), W + 35)
    assert (finding.level, finding.host, finding.kind, finding.text) == (
        "warning", "h2", "chief_silent", WORDS)
    # The owners' read (every few seconds, for `gpus` and the dashboard) keeps the silences.
    monkeypatch.setattr(owners_module, "read_run_hosts",
                        lambda fleet, run_id, hosts: ((), {}, silences_from("h2", [RAW]), {}))
    monkeypatch.setattr(owners_module, "process_users", lambda fleet, pids: {})
    cache = OwnerCache(fleet=None, snapshots=dict)
    cache.refresh("r1", ["h1", "h2"])
    assert cache.silences == silences_from("h2", [RAW])


def test_gpus_json_names_the_silence_on_its_host() -> None:
    from tfctl.remote.gpus.lastseen import HostTelemetry

    snaps = {h: HostTelemetry(h, (), (), last_sample_at=100.0) for h in ("h1", "h2")}
    rows = output.gpu_objects(snaps, {}, 100.0, silences_from("h2", [RAW]))
    assert {r["host"]: [s["task"] for s in r["silences"]] for r in rows} == {
        "h1": [], "h2": ["worker:0"]}
