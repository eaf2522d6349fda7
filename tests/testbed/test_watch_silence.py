"""The run's watcher tells a refusal (the chief's task has ended) from silence (no answer).

A refusal is the peer's host answering the connect with a reset: nothing listens there. Silence
(a timeout, no route, host or network unreachable) is a cut link or a host powered off, which
TensorFlow's own connections wait through: it never ends a host's part within the job's
silence window. The pure parts are table-tested; real sockets on localhost give each outcome
(a listener whose accept queue is full drops the SYN: a port that never answers); a real
watcher, started by the agent's `launch`, shows the silence in `status` and ends its host's
part only after the window.
"""

from __future__ import annotations

import errno
import json
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.agentdriver import AgentDir, ok, sh, wait_for
from tests.support.testbed.layout import free_port
from tfctl.remote.agent.watch import (
    OPEN,
    REFUSED,
    SILENT,
    EndJudge,
    connect_outcome,
    connect_words,
    probe_port,
)

pytestmark = pytest.mark.timeout(60)


# ---------------------------------------------------------------- the connect's outcome

@pytest.mark.parametrize(("exc", "outcome", "words"), [
    (ConnectionRefusedError(errno.ECONNREFUSED, "Connection refused"), REFUSED,
     "Connection refused"),
    (OSError(errno.ECONNREFUSED, "Connection refused"), REFUSED, "Connection refused"),
    (TimeoutError("timed out"), SILENT, "timed out"),  # socket.timeout since Python 3.10
    (OSError(errno.ETIMEDOUT, "Connection timed out"), SILENT, "Connection timed out"),
    (OSError(errno.EHOSTUNREACH, "No route to host"), SILENT, "No route to host"),
    (OSError(errno.ENETUNREACH, "Network is unreachable"), SILENT, "Network is unreachable"),
    (OSError(errno.ENETDOWN, "Network is down"), SILENT, "Network is down"),
    (OSError(errno.EHOSTDOWN, "Host is down"), SILENT, "Host is down"),
    (socket.gaierror(-3, "Temporary failure in name resolution"), SILENT,
     "Temporary failure in name resolution"),
])
def test_only_a_refusal_says_the_task_ended(exc: OSError, outcome: str, words: str) -> None:
    assert (connect_outcome(exc), connect_words(exc)) == (outcome, words)


@pytest.fixture
def deaf_port() -> Iterator[int]:
    """A port on localhost that never answers a connect: its listener's accept queue is full
    (backlog 0, one connection never accepted), so the kernel drops every further SYN."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    port = listener.getsockname()[1]
    filler = socket.create_connection(("127.0.0.1", port), timeout=1.0)
    try:
        yield port
    finally:
        filler.close()
        listener.close()


def test_probe_tells_open_refused_and_silent_ports_apart(deaf_port: int) -> None:
    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen(8)
        assert probe_port("127.0.0.1", listening.getsockname()[1]) == (OPEN, "accepted")
    assert probe_port("127.0.0.1", free_port()) == (REFUSED, "Connection refused")
    started = time.monotonic()
    assert probe_port("127.0.0.1", deaf_port, timeout_s=0.3) == (SILENT, "timed out")
    assert time.monotonic() - started >= 0.25  # it waited for an answer that never came


# ---------------------------------------------------------------- the judge, over time

RULE: dict[str, Any] = {"mode": "any", "start_timeout_s": 0.0, "silence_window_s": 300.0,
        "deciders": [{"name": "chief:0", "host": "h1", "address": "10.0.0.1", "port": 2220,
                      "closed_for_good_s": 20.0}]}


def _judge(outcomes: list[tuple[float, str]], rule: dict[str, Any] = RULE
           ) -> tuple[EndJudge, list[tuple[float, str | None]]]:
    """Feed the judge (on h2) one probe outcome per look, at the times given."""
    judge = EndJudge(rule, "h2", 0.0)
    judge.was_up = True
    verdicts = []
    for at, outcome in outcomes:
        words = {OPEN: "accepted", REFUSED: "Connection refused", SILENT: "timed out"}[outcome]
        verdicts.append((at, judge.verdict({}, at, lambda a, p, o=outcome, w=words: (o, w))))
    return judge, verdicts


def _first_end(verdicts: list[tuple[float, str | None]]) -> tuple[float, str] | None:
    return next(((at, v) for at, v in verdicts if v is not None), None)


@pytest.mark.parametrize(("looks", "end"), [
    # The chief's port refuses for good: the job has ended.
    ([(t, REFUSED) for t in range(0, 30)], (20, "chief:0 ended")),
    # A refusal that stops (the task restarted) is no end.
    ([(t, REFUSED) for t in range(0, 15)] + [(t, OPEN) for t in range(15, 40)], None),
    # Silence, however long within the window, is no end (cuts of 40 s, 60 s, 4 min).
    ([(t, SILENT) for t in range(0, 299)], None),
    # Silence, then the chief answers again: nothing ended.
    ([(t, SILENT) for t in range(0, 100)] + [(t, OPEN) for t in range(100, 120)], None),
    # Silence that outlasts the window ends this host's part, saying why.
    ([(t, SILENT) for t in range(0, 310)],
     (300, "chief:0 silent for 300 s (no answer from its port)")),
    # Silence never counts toward "closed for good": the refusals after a heal are counted
    # from the first refusal, not from when the silence began.
    ([(t, SILENT) for t in range(0, 60)] + [(t, REFUSED) for t in range(60, 90)],
     (80, "chief:0 ended")),
])
def test_silence_is_not_an_end(looks: list[tuple[float, str]],
                               end: tuple[float, str] | None) -> None:
    _, verdicts = _judge(looks)
    assert _first_end(verdicts) == end


def test_the_judge_names_the_silence_and_since_when() -> None:
    judge, _ = _judge([(0, OPEN), (5, SILENT), (6, SILENT), (7, SILENT)])
    assert judge.silences() == {"chief:0": {
        "task": "chief:0", "host": "h1", "address": "10.0.0.1", "port": 2220, "since": 5,
        "why": "timed out", "window_s": 300.0}}
    judge, _ = _judge([(0, SILENT), (1, OPEN)])
    assert judge.silences() == {}
    judge, _ = _judge([(0, SILENT), (1, REFUSED)])
    assert judge.silences() == {}


def test_every_worker_rule_needs_each_worker_ended_or_silent_past_the_window() -> None:
    rule = dict(RULE, mode="all", deciders=[
        dict(RULE["deciders"][0], name="worker:0", port=2223),
        dict(RULE["deciders"][0], name="worker:1", port=2224)])
    judge = EndJudge(rule, "h2", 0.0)
    judge.was_up = True

    def probe(address: str, port: int) -> tuple[str, str]:
        return (REFUSED, "Connection refused") if port == 2223 else (SILENT, "timed out")

    assert [judge.verdict({}, t, probe) for t in (0, 30, 299)] == [None, None, None]
    assert judge.verdict({}, 300, probe) == \
        "worker:0 ended; worker:1 silent for 300 s (no answer from its port)"


def test_the_deciders_ports_are_probed_at_once() -> None:
    """Every silent port costs the probe's whole timeout: one after the other, a host cut off
    from sixteen workers would look once every sixteen seconds."""
    rule = dict(RULE, mode="all", deciders=[
        dict(RULE["deciders"][0], name=f"worker:{i}", port=2223 + i) for i in range(4)])
    judge = EndJudge(rule, "h2", 0.0)
    together = threading.Barrier(4, timeout=10)

    def probe(address: str, port: int) -> tuple[str, str]:
        together.wait()  # broken (an error) unless all four probes are under way at once
        return SILENT, "timed out"

    assert judge.verdict({}, 0, probe) is None
    assert sorted(judge.silences()) == ["worker:0", "worker:1", "worker:2", "worker:3"]


# ---------------------------------------------------------------- a real watcher

def _end_rule(port: int, window_s: float) -> dict[str, Any]:
    return {"mode": "any", "serving": ["ps"], "start_timeout_s": 0.0,
            "silence_window_s": window_s, "tensorboard": {"keep": False, "grace_s": 0.0},
            "deciders": [{"name": "chief:0", "host": "h1", "address": "127.0.0.1",
                          "port": port, "closed_for_good_s": 1.0}]}


def _events(agent_dir: AgentDir, run_id: str) -> list[dict[str, Any]]:
    path = Path(agent_dir.workdir, ".tfctl", "runs", run_id, "events.jsonl")
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def _finished(agent_dir: AgentDir, run_id: str) -> dict[str, Any] | None:
    path = Path(agent_dir.workdir, ".tfctl", "runs", run_id, "finished.json")
    return json.loads(path.read_text()) if path.exists() else None


def _status_if_silent(agent_dir: AgentDir, run_id: str) -> dict[str, Any] | None:
    answer: dict[str, Any] = ok("status", workdir=agent_dir.workdir, run_id=run_id)
    return answer if answer["silences"] else None


def test_a_silent_chief_is_reported_and_ends_the_part_only_after_the_window(
        agent_dir: AgentDir, deaf_port: int) -> None:
    run_id = agent_dir.start([sh("ps:0", "exec sleep 60")], host="h2",
                       end=_end_rule(deaf_port, window_s=6.0))
    answer = wait_for(lambda: _status_if_silent(agent_dir, run_id))
    assert answer, "the watcher never reported the silence"
    [silence] = answer["silences"]
    assert (silence["task"], silence["host"], silence["port"], silence["why"],
            silence["window_s"]) == ("chief:0", "h1", deaf_port, "timed out", 6.0)
    assert time.time() - silence["since"] < 6.0
    assert [t["state"] for t in answer["tasks"]] == ["running"]
    assert any(
        e["event"] == "silence" and e["peer"] == "chief:0" for e in _events(agent_dir, run_id)
    )
    # Past the window: the host's part ends as at the job's end, the silence as its cause.
    assert wait_for(lambda: agent_dir.status(run_id)["ps:0"]["state"] == "stopped", 20.0)
    finished = _finished(agent_dir, run_id)
    assert finished is not None
    assert finished["status"]["cause"] == "chief:0 silent for 6 s (no answer from its port)"
    assert time.time() - silence["since"] >= 6.0
    assert wait_for(lambda: not ok("status", workdir=agent_dir.workdir, run_id=run_id)["silences"])


def test_a_chief_heard_again_clears_the_silence_and_a_refusal_still_ends_the_job(
        agent_dir: AgentDir) -> None:
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    port = listener.getsockname()[1]
    filler = socket.create_connection(("127.0.0.1", port), timeout=1.0)  # now deaf
    try:
        run_id = agent_dir.start([sh("ps:0", "exec sleep 60")], host="h2",
                           end=_end_rule(port, window_s=300.0))
        assert wait_for(lambda: ok("status", workdir=agent_dir.workdir, run_id=run_id)["silences"])
        filler.close()
        listener.close()
        with socket.socket() as back:  # the chief answers again
            back.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            back.bind(("127.0.0.1", port))
            back.listen(64)
            assert wait_for(
                lambda: not ok("status", workdir=agent_dir.workdir, run_id=run_id)["silences"])
            assert any(e["event"] == "heard" for e in _events(agent_dir, run_id))
            assert agent_dir.status(run_id)["ps:0"]["state"] == "running"
        # The chief's port now refuses: the job has ended (closed for good after 1 s).
        assert wait_for(lambda: agent_dir.status(run_id)["ps:0"]["state"] == "stopped", 20.0)
        finished = _finished(agent_dir, run_id)
        assert finished is not None and finished["status"]["cause"] == "chief:0 ended"
    finally:
        filler.close()
        listener.close()
