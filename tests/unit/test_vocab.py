"""The agent's vocabulary (remote/agent/vocab.py): every record read back from its wire data as
it was written, an older record read with defaults, a request without its required fields or
its version refused, and an agent of another wire version told apart, through the real agent
program."""

from __future__ import annotations

import ast
import hashlib
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tfctl.inventory.model import Host
from tfctl.remote.agent import vocab
from tfctl.remote.agent.vocab import (
    ClaimsAnswer,
    GpuState,
    HostUser,
    PortState,
    ReserveAnswer,
    ReserveRequest,
    StatusAnswer,
    SyncDiff,
    TaskRecord,
    TicketRequest,
    UpCheck,
)
from tfctl.remote.agent.wire import ANSWER_MARK, WIRE_VERSION
from tfctl.remote.agent.wirerecord import BY_NAME, MANY, Wire, fields
from tfctl.remote.connect.local import LocalTransport
from tfctl.remote.connect.session import agentclient, agentops
from tfctl.remote.connect.session.program import AGENT_FILES, agent_source
from tfctl.remote.errors import AgentFailed, AgentOutdated, agent_error

RECORDS = sorted((cls for cls in vars(vocab).values()
                  if isinstance(cls, type) and issubclass(cls, Wire) and cls is not Wire),
                 key=lambda cls: cls.__name__)


def sample(cls: type[Wire], depth: int = 0) -> Any:
    """A record of `cls` whose every field holds a value other than its default."""
    given = {}
    for f in fields(cls):
        nested = cls.NESTED.get(f.name)
        if nested is not None:
            shape, kind = nested
            one = sample(kind, depth + 1)
            given[f.name] = (one,) if shape == MANY else {"a": one} if shape == BY_NAME else one
        else:
            given[f.name] = _value(f.name, f.annotation.replace(" | None", ""))
    return cls(**given)


def _value(name: str, annotation: str) -> Any:
    simple = {"str": f"{name}-x", "int": 7, "float": 2.5, "bool": True, "Any": [["a", "b"]]}
    if annotation in simple:
        return simple[annotation]
    if annotation.startswith("tuple[int"):
        return (3, 4)
    if annotation.startswith("tuple[dict"):
        return ({"task": "ps:0", "since": 1.0},)
    if annotation.startswith(("tuple", "list")):
        return ("a", "b") if annotation.startswith("tuple") else ["a", "b"]
    if annotation.startswith("dict[str, int]"):
        return {"worker:0": 12}
    if annotation.startswith("dict"):
        return {"key": [1, "two"], "nested": {"x": None}}
    raise AssertionError(f"no sample for {name}: {annotation}")


def test_the_vocabulary_has_every_record() -> None:
    names = {cls.__name__ for cls in RECORDS}
    assert {"TaskRecord", "StatusAnswer", "StatusRequest", "UpCheck", "UpCheckRequest", "UpGo",
            "UpGoRequest", "PortState", "SyncDiff", "StartState", "StopAnswer", "RunRecord",
            "LogChunk", "LaunchAnswer", "RestartLostAnswer",
            # the lab's operations, and the answers that were mappings
            "LabRequest", "GpuState", "GpuStateRequest", "ClaimsRequest", "ClaimsAnswer",
            "HostUser", "ReserveRequest", "ReserveAnswer", "ReleaseRequest", "ReleaseAnswer",
            "TicketRequest", "TicketPutAnswer", "TicketDropAnswer", "ProbeAnswer",
            "ListenAnswer", "ConnectAnswer", "ConnectResult", "ProcsAnswer", "FinishAnswer",
            "UpMark"} <= names
    assert len(RECORDS) >= 50


def test_every_operation_takes_a_record_and_answers_one() -> None:
    """The agent's table names a request record for every operation (no dict requests), and
    every handler says it answers a record."""
    from tfctl.remote.agent import optable

    for op, (handler, request) in optable.OPS.items():
        assert issubclass(request, Wire), op
        answer = handler.__annotations__["return"]
        assert answer in {cls.__name__ for cls in RECORDS}, (op, answer)


@pytest.mark.parametrize("cls", RECORDS, ids=lambda cls: cls.__name__)
def test_every_record_reads_back_from_its_wire_data_as_written(cls: type[Wire]) -> None:
    record = sample(cls)
    wire = json.loads(json.dumps(record.to_wire()))  # as it crosses the wire
    assert cls.from_wire(wire) == record
    for default in (cls(), ):  # and a record of defaults only
        assert cls.from_wire(json.loads(json.dumps(default.to_wire()))) == default


@pytest.mark.parametrize("cls", RECORDS, ids=lambda cls: cls.__name__)
def test_an_older_record_reads_with_defaults_and_unknown_keys_are_ignored(
        cls: type[Wire]) -> None:
    assert cls.from_wire({}) == cls()
    assert cls.from_wire(None) == cls()
    assert cls.from_wire({"a_key_of_a_newer_agent": 1}) == cls()


def test_fields_keep_the_names_the_wire_has_always_had() -> None:
    assert TaskRecord(mask="0", host_restarted_at_s=5.0).to_wire()["cuda_visible_devices"] == "0"
    assert TaskRecord.from_wire({"host_restarted_at": 5.0}).host_restarted_at_s == 5.0
    assert PortState(2222, False, tfctl_run_id="r1").to_wire()["tfctl_run_id"] == "r1"
    assert PortState.from_wire({"port": 1, "free": False, "tfctl_task": "ps:0"}).task == "ps:0"
    assert SyncDiff.from_wire({"dest": "/w", "rsync": "/usr/bin/rsync"}).has_rsync is True
    assert SyncDiff.from_wire({"dest": "/w", "rsync": None}).has_rsync is False
    assert UpCheck.from_wire({"choose": {"chosen": {"ps:0": 2300}}}).chosen == {
        "chosen": {"ps:0": 2300}}
    assert ReserveRequest((1,), 5.0).to_wire()["until"] == 5.0
    assert ReserveAnswer.from_wire({"until": 5.0, "me": {"uid": 7}}).until_s == 5.0
    assert TicketRequest("q-1").to_wire()["id"] == "q-1"
    assert TicketRequest.from_wire({"id": "q-2", "gpus": [0, 1]}) == TicketRequest("q-2",
                                                                                  gpus=(0, 1))


def test_the_lab_answers_keep_their_shape() -> None:
    """`lab` and `gpu_state` are one record whose claims part is the `claims` answer's, and
    `up_check` carries that answer whole."""
    raw = {"me": {"uid": 1000, "user": "me"}, "claims": [{"file": "a.run.r.json"}],
           "warnings": ["w"], "gpus": [{"index": 0}], "procs": {"42": None},
           "idle": {"sampled_at": None}}
    state = GpuState.from_wire(raw)
    assert (state.me, state.claims, state.procs) == (HostUser(1000, "me"),
                                                   ({"file": "a.run.r.json"},), {"42": None})
    assert isinstance(state, ClaimsAnswer)
    assert {k: v for k, v in state.to_wire().items() if k in raw} == raw
    check = UpCheck.from_wire({"claims": {"me": {"uid": 1}, "claims": [], "warnings": []}})
    assert check.claims == ClaimsAnswer(HostUser(1))


def test_an_old_status_answer_reads_its_tasks_as_records() -> None:
    raw = {"run_id": "r1", "run_dir": "/w/r1", "tasks": [
        {"name": "worker:1", "state": "running", "pid": 10, "restarts": None, "pids": [10, 11],
         "cuda_visible_devices": "1"},
        {"name": "ps:0"}]}
    answer = StatusAnswer.from_wire(raw)
    worker, ps = answer.tasks
    assert (worker.type, worker.index, worker.restarts, worker.pids, worker.mask) == \
        ("worker", 1, 0, (10, 11), "1")
    assert (ps.state, ps.type, ps.index, ps.last_lines, ps.cwd) == ("lost", "ps", 0, (), None)
    assert StatusAnswer("r1", "/w/r1", tuple(raw["tasks"])) == answer  # type: ignore[arg-type]


def test_no_two_agent_files_define_the_same_name() -> None:
    """The agent files are joined into one module: a second definition would replace the first
    on the hosts only (the in-process tests import each file on its own)."""
    here = Path(vocab.__file__).parent
    seen: dict[str, str] = {}
    clashes = []
    for name in AGENT_FILES:
        for node in ast.parse((here / name).read_text()).body:
            targets = [node.name] if isinstance(node, ast.FunctionDef | ast.ClassDef) else [
                t.id for t in getattr(node, "targets", []) if isinstance(t, ast.Name)]
            if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                targets = [node.target.id]
            for target in targets:
                if target in seen and target != "__all__":
                    clashes.append(f"{target}: {seen[target]} and {name}")
                seen.setdefault(target, name)
    assert clashes == []


# ---------------------------------------------------------------- an agent of another version

def _host(tmp_path: Path) -> Host:
    return Host(name="box", address="127.0.0.1", user=None, port=None, identity_file=None,
                known_hosts="/dev/null", jump=None, workdir=str(tmp_path / "work"),
                python=sys.executable, env={}, gpus=(), ps=0, transport="local")


def _agent(monkeypatch: pytest.MonkeyPatch, source: str) -> None:
    """Make `source` the agent program the client sends (and installs) on a start."""
    program = (source + "\n").encode()
    name = f"agent_{hashlib.sha256(program).hexdigest()[:16]}.py"
    monkeypatch.setattr(agentclient, "payload",
                        lambda: agentclient.Payload(name, len(program), program))


def test_the_current_agent_answers_in_the_current_version(tmp_path: Path) -> None:
    t = LocalTransport(_host(tmp_path))
    assert agentops.runs(t, str(tmp_path / "work")) == []


def _served(tmp_path: Path, lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The real agent program's answers to `lines`, one request per line (a session)."""
    program = tmp_path / "agent.py"
    program.write_text(agent_source() + "\nimport sys\nserve(sys.stdin.buffer)\n")
    stdin = "".join(json.dumps(line) + "\n" for line in lines)
    done = subprocess.run([sys.executable, "-S", str(program)], input=stdin.encode(),
                          capture_output=True, timeout=60, check=True)
    mark = ANSWER_MARK.encode()
    return [json.loads(line[len(mark):]) for line in done.stdout.splitlines()
            if line.startswith(mark)]


def test_a_request_without_a_version_is_refused_like_one_of_another(tmp_path: Path) -> None:
    work = str(tmp_path / "work")
    prepare = {"op": "prepare", "workdir": work, "run_id": "r1", "manifest": {"tasks": []}}
    unversioned, other = _served(tmp_path, [prepare, dict(prepare, v=WIRE_VERSION + 1)])
    for answer in (unversioned, other):
        assert (answer["ok"], answer["kind"], answer["v"]) == (False, "wire_version",
                                                               WIRE_VERSION)
        assert isinstance(agent_error("box", answer), AgentOutdated)
    assert "the request no version: nothing was done" in unversioned["error"]
    assert f"the request version {WIRE_VERSION + 1}: nothing was done" in other["error"]
    assert not (tmp_path / "work" / ".tfctl" / "runs" / "r1").exists()


def test_a_request_without_its_required_fields_is_refused(tmp_path: Path) -> None:
    answers = _served(tmp_path, [{"op": "reserve", "v": WIRE_VERSION, "gpus": [0]},
                                 {"op": "ticket_put", "v": WIRE_VERSION, "job": "j"},
                                 {"op": "lab", "v": WIRE_VERSION}])
    assert [(a["kind"], a["error"]) for a in answers] == [
        ("bad_request", "the reserve request needs 'until'"),
        ("bad_request", "the ticket_put request needs 'id'"),
        ("bad_request", "the lab request needs 'workdir'")]
    assert all(isinstance(agent_error("box", a), AgentFailed) for a in answers)


def test_only_the_session_package_speaks_the_raw_wire() -> None:
    """Every call to a host goes through the typed client (`agentops`): `agentclient.call` and
    `agentclient.post` are the session package's own."""
    root = Path(vocab.__file__).parents[2]
    session = root / "remote" / "connect" / "session"
    found = [f"{path.relative_to(root)}:{n}" for floor in ("inventory", "remote", "tui")
             for path in sorted((root / floor).rglob("*.py")) if session not in path.parents
             for n, line in enumerate(path.read_text().splitlines(), 1)
             if re.search(r"agentclient\.(call|post)\(", line)]
    assert found == []


def test_an_agent_of_another_version_refuses_and_does_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    newer = re.sub(r"^WIRE_VERSION = \d+$", f"WIRE_VERSION = {WIRE_VERSION + 1}",
                   agent_source(), flags=re.M)
    assert newer != agent_source()
    _agent(monkeypatch, newer)
    t = LocalTransport(_host(tmp_path))
    with pytest.raises(AgentOutdated) as caught:
        agentops.up_go(t, str(tmp_path / "work"), "r1", manifest={"tasks": []})
    assert f"version {WIRE_VERSION + 1} of the wire" in str(caught.value)
    assert caught.value.data["kind"] == "wire_version"
    assert not (tmp_path / "work" / ".tfctl" / "runs" / "r1").exists()


def test_an_agent_older_than_versions_is_told_apart(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """An agent that answers without `v`, as every agent did before the vocabulary had one."""
    old = (f"import json, sys\nMARK = {ANSWER_MARK!r}\n"
           "def serve(stream):\n"
           "    for line in stream:\n"
           "        sys.stdout.write(MARK + json.dumps({'ok': True, 'result': {'runs': []}})"
           " + '\\n')\n"
           "        sys.stdout.flush()\n")
    _agent(monkeypatch, old)
    t = LocalTransport(_host(tmp_path))
    with pytest.raises(AgentOutdated, match="answers in no version of the wire"):
        agentops.runs(t, str(tmp_path / "work"))
