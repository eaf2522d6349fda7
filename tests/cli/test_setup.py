"""`job.setup` on `transport: local` hosts: real shells, real files, no SSH (the lab tests add it).

Each host is a folder under tmp_path; the setup script runs exactly as it would on a lab host.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tfctl.inventory.model import Host, Inventory, Job
from tfctl.remote.connect.fleet import Fleet
from tfctl.remote.runs.setup import (
    MARK,
    SetupFailed,
    SetupOutcome,
    parse_setup_output,
    run_setup,
    setup_errors,
    setup_host,
    setup_waves,
)


def _host(name: str, workdir: Path, shared_fs: bool = False) -> Host:
    return Host(name=name, address="127.0.0.1", user=None, port=None, identity_file=None,
                known_hosts="/dev/null", jump=None, workdir=str(workdir), python=sys.executable,
                env={}, gpus=(), ps=0, transport="local", shared_fs=shared_fs)


def _fleet(tmp: Path, setup: tuple[str, ...], inputs: tuple[str, ...] = (),
           names: tuple[str, ...] = ("a",), shared: tuple[str, ...] = ()) -> Fleet:
    hosts = []
    for name in names:
        workdir = tmp / (shared[0] if name in shared[1:] else name) if shared else tmp / name
        workdir.mkdir(parents=True, exist_ok=True)
        hosts.append(_host(name, workdir, shared_fs=name in shared[1:]))
    job = Job(script="job.py", setup=setup, setup_inputs=inputs)
    return Fleet(Inventory("t", tuple(hosts), job, path=str(tmp / "cluster.yaml")))


def _once(fleet: Fleet, host: str = "a", force: bool = False) -> SetupOutcome:
    return setup_host(fleet.transport(host), fleet.inventory.job, force)


def test_commands_run_in_order_in_one_shell_in_the_workdir(tmp_path: Path) -> None:
    (tmp_path / "a" / "sub").mkdir(parents=True)
    fleet = _fleet(tmp_path, ("echo first", "cd sub && export GREETING=hello",
                              'echo "$GREETING from $(basename "$PWD")" > ../result.txt'))
    outcome = _once(fleet)
    assert outcome.state == "done" and outcome.ok, outcome
    # cd and export carried over to the next command, as in one shell script
    assert (tmp_path / "a" / "result.txt").read_text() == "hello from sub\n"
    assert outcome.log_path is not None and outcome.inputs_hash
    log = Path(outcome.log_path).read_text()
    assert log.startswith("$ echo first\nfirst\n$ cd sub && export GREETING=hello\n")
    assert Path(outcome.log_path).parent == tmp_path / "a" / ".tfctl" / "setup"
    assert (tmp_path / "a/.tfctl/setup" / f"done-{outcome.inputs_hash}").exists()


def _write(path: Path, text: str, mtime: int = 1_700_000_000) -> None:
    path.write_text(text)
    os.utime(path, (mtime, mtime))


def test_unchanged_inputs_skip_changed_inputs_rerun(tmp_path: Path) -> None:
    fleet = _fleet(tmp_path, ("echo run >> runs.txt",), inputs=("requirements.txt",))
    req = tmp_path / "a" / "requirements.txt"
    _write(req, "six\n")
    runs = tmp_path / "a" / "runs.txt"
    first = _once(fleet)
    assert first.state == "done"
    second = _once(fleet)
    assert second.state == "skipped" and second.done_at is not None
    assert second.log_path == first.log_path and runs.read_text() == "run\n"
    assert "skipped" in second.summary()
    _write(req, "six==1.17.0\n")  # new content, same mtime
    third = _once(fleet)
    assert third.state == "done" and third.inputs_hash != first.inputs_hash
    assert runs.read_text() == "run\nrun\n"
    # back to the first requirements: the venv now holds the second ones, so it runs again
    _write(req, "six\n")
    fourth = _once(fleet)
    assert fourth.state == "done" and fourth.inputs_hash == first.inputs_hash
    assert runs.read_text().count("run") == 3
    assert _once(fleet).state == "skipped"
    os.utime(req, (1_700_000_100, 1_700_000_100))  # `touch requirements.txt`: as with make
    assert _once(fleet).state == "done"


def test_force_reruns_and_command_change_reruns(tmp_path: Path) -> None:
    fleet = _fleet(tmp_path, ("echo x >> runs.txt",))
    assert _once(fleet).state == "done"
    assert _once(fleet, force=True).state == "done"
    assert (tmp_path / "a" / "runs.txt").read_text() == "x\nx\n"
    changed = _fleet(tmp_path, ("echo y >> runs.txt",))
    assert _once(changed).state == "done"
    assert _once(changed).state == "skipped"


def test_directory_and_missing_inputs_are_hashed(tmp_path: Path) -> None:
    fleet = _fleet(tmp_path, ("true",), inputs=("deps", "not-there.txt"))
    (tmp_path / "a" / "deps" / "inner").mkdir(parents=True)
    _write(tmp_path / "a" / "deps" / "inner" / "one.txt", "1")
    assert _once(fleet).state == "done"
    assert _once(fleet).state == "skipped"
    _write(tmp_path / "a" / "deps" / "inner" / "one.txt", "2")
    assert _once(fleet).state == "done"
    (tmp_path / "a" / "not-there.txt").write_text("now it is")
    assert _once(fleet).state == "done"


def test_first_failure_stops_names_command_status_and_tail(tmp_path: Path) -> None:
    fleet = _fleet(tmp_path, ("echo before", "echo 'no such' package >&2; sh -c 'exit 4'",
                              "touch never-ran"))
    outcome = _once(fleet)
    assert outcome.state == "failed" and not outcome.ok
    assert (outcome.failed_index, outcome.exit_code) == (1, 4)
    assert outcome.failed_command == "echo 'no such' package >&2; sh -c 'exit 4'"
    assert "no such package" in outcome.tail
    assert not (tmp_path / "a" / "never-ran").exists()
    assert not list((tmp_path / "a/.tfctl/setup").glob("done-*"))
    err = SetupFailed(outcome)
    assert str(err) == ("a: setup failed: command 2/3 `echo 'no such' package >&2; "
                        "sh -c 'exit 4'` exited 4")
    assert "no such package" in err.full() and outcome.log_path in err.full()
    assert _once(fleet).state == "failed"  # a failed setup is never cached


def test_a_command_that_exits_the_shell_is_the_failed_one(tmp_path: Path) -> None:
    fleet = _fleet(tmp_path, ("echo ok", "echo leaving; exit 5", "touch never-ran"))
    outcome = _once(fleet)
    assert (outcome.state, outcome.failed_index, outcome.exit_code) == ("failed", 1, 5)
    assert outcome.tail[-2:] == ("$ echo leaving; exit 5", "leaving")
    assert not (tmp_path / "a" / "never-ran").exists()


def test_progress_names_each_command_as_it_starts(tmp_path: Path) -> None:
    fleet = _fleet(tmp_path, ("true", "false"))
    seen: list[tuple[str, str]] = []
    setup_host(fleet.transport("a"), fleet.inventory.job, progress=lambda h, m: seen.append((h, m)))
    assert seen == [("a", "[1/2] true"), ("a", "[2/2] false"), ("a", "[2/2] exited 1")]


def test_every_host_finishes_when_one_fails(tmp_path: Path) -> None:
    fail_on_b = 'sleep 0.3; [ "$(basename "$PWD")" != b ]'
    fleet = _fleet(tmp_path, (fail_on_b, "touch finished"), names=("a", "b", "c"))
    result = run_setup(fleet)
    assert list(result.succeeded) == ["a", "b", "c"] and not result.failed
    assert {h: o.state for h, o in result.succeeded.items()} == {
        "a": "done", "b": "failed", "c": "done"}
    assert (tmp_path / "a" / "finished").exists() and (tmp_path / "c" / "finished").exists()
    errors = setup_errors(result)
    assert [e.host for e in errors] == ["b"] and "command 1/2" in str(errors[0])


def test_shared_fs_hosts_wait_and_then_skip(tmp_path: Path) -> None:
    fleet = _fleet(tmp_path, ("echo once >> runs.txt",), names=("a", "b"), shared=("a", "b"))
    assert [[h.name for h in w] for w in setup_waves(fleet.inventory.hosts)] == [["a"], ["b"]]
    result = run_setup(fleet)
    assert {h: o.state for h, o in result.succeeded.items()} == {"a": "done", "b": "skipped"}
    assert (tmp_path / "a" / "runs.txt").read_text() == "once\n"


def test_no_setup_means_no_round_trip(tmp_path: Path) -> None:
    fleet = _fleet(tmp_path, ())
    assert run_setup(fleet).succeeded == {} and not fleet._transports


@pytest.mark.parametrize("lines, expected", [
    # the connection died during command 2: not finished, and it names the command
    ([f"{MARK}hash ab", f"{MARK}log /w/l", f"{MARK}start 0", f"{MARK}ok 0", f"{MARK}start 1"],
     ("not_finished", 1, None)),
    ([], ("not_finished", None, None)),
    ([f"{MARK}error cannot enter the workdir /x", f"{MARK}exit 0"], ("failed", None, None)),
    ([f"{MARK}hash ab", f"{MARK}start 0", f"{MARK}fail 0 2", f"{MARK}out boom",
      f"{MARK}exit 0"], ("failed", 0, 2)),
    ([f"{MARK}hash ab", f"{MARK}start 0", f"{MARK}exit 9"], ("failed", 0, 9)),
    ([f"{MARK}hash ab", f"{MARK}log /l", f"{MARK}skip 1700000000", f"{MARK}exit 0"],
     ("skipped", None, None)),
])
def test_parse_setup_output(lines: list[str], expected: tuple[object, ...]) -> None:
    outcome = parse_setup_output("h", ("c1", "c2"), lines)
    assert (outcome.state, outcome.failed_index, outcome.exit_code) == expected
    if outcome.state == "not_finished":
        assert "did not finish" in outcome.summary()
    if expected[0] == "failed" and expected[1] is None:
        assert "cannot enter the workdir /x" in outcome.summary()


def test_cli_setup_runs_then_skips(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "requirements.txt").write_text("six\n")
    inv = src / "cluster.yaml"
    inv.write_text(yaml.safe_dump({
        "name": "t", "job": {"script": "job.py", "setup": ["cat requirements.txt > seen.txt"],
                             "setup_inputs": ["requirements.txt"]},
        "hosts": [{"name": n, "transport": "local", "workdir": str(tmp_path / n),
                   "python": sys.executable} for n in ("a", "b")]}))

    def tfctl(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "tfctl.tui", "-i", str(inv), *args],
                              capture_output=True, text=True, timeout=60, cwd=src,
                              env={**os.environ, "NO_COLOR": "1"})

    first = tfctl("setup")
    assert first.returncode == 0, first.stdout + first.stderr
    for name in ("a", "b"):
        assert f"{name}: setup done in" in first.stdout
        assert f"setup {name}: [1/1] cat requirements.txt > seen.txt" in first.stderr
        assert (tmp_path / name / "seen.txt").read_text() == "six\n"  # the synced copy
    second = tfctl("setup")
    assert "a: setup skipped" in second.stdout and "b: setup skipped" in second.stdout
    forced = tfctl("setup", "--force")
    assert "a: setup done in" in forced.stdout and "b: setup done in" in forced.stdout
