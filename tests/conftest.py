"""Shared test setup: the testbed's fixtures (tests/support/testbed) and the others the tests
share (tests/support/fixtures.py), stopping what a test started, and the session's end, which
fails the run when a process the suite started still runs (tests/support/leftovers.py)."""

import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.support import leftovers
from tests.support.testbedtools import Up, tfctl, up_ok

pytest_plugins = ["tests.support.testbed.fixtures", "tests.support.fixtures"]

# Every process the suite starts inherits this session's marker (tests/support/leftovers.py); set
# before any test, replacing one an outer pytest set.
SESSION = leftovers.session_token()
os.environ[leftovers.SESSION_VAR] = SESSION
_test_starts: list[tuple[float, str]] = []
"""(seconds since boot, test id) as each test began: which test a leftover process came from."""

# Commands keep no connections for the next one unless a test asks (tests/testbed/test_hold.py):
# a holder from one test would serve the next test's commands, whose lab may have changed.
# TFCTL_TEST_PERSIST=60 runs the whole suite the way users' commands run by default.
os.environ["TFCTL_PERSIST"] = os.environ.get("TFCTL_TEST_PERSIST", "0")

# What the suite's commands remember of their runs (remote/runs/current.py: one state file per
# inventory in $XDG_STATE_HOME/tfctl) stays in a folder of this session's, removed at its end,
# never in the home of whoever runs the suite.
STATE_HOME = tempfile.mkdtemp(prefix="tfctl-test-state-")
os.environ["XDG_STATE_HOME"] = STATE_HOME


@pytest.fixture
def down_after() -> Iterator[list[Path]]:
    """Inventories a test appends here get `tfctl down` afterwards, pass or fail, so the next
    test's `up` finds no live run."""
    inventories: list[Path] = []
    yield inventories
    for inv in inventories:
        tfctl(inv, "down", "--grace", "1")


@pytest.fixture
def up_run(down_after: list[Path]) -> Callable[..., Up]:
    """`up_run(inventory, *args)`: `tfctl up` with `args`, which must succeed (`Up`: the run's
    id and what `up` printed); the inventory is brought down after the test (`down_after`)."""

    def up(inventory: Path, *args: str) -> Up:
        if inventory not in down_after:
            down_after.append(inventory)
        return up_ok(inventory, *args)

    return up


@pytest.fixture
def utc() -> Iterator[None]:
    """The local time zone pinned to UTC, so times drawn as local ("since 09:42:10") are stable."""
    before = os.environ.get("TZ")
    os.environ["TZ"] = "UTC"
    time.tzset()
    yield
    if before is None:
        del os.environ["TZ"]
    else:
        os.environ["TZ"] = before
    time.tzset()


def pytest_runtest_logstart(nodeid: str, location: object) -> None:
    _test_starts.append((leftovers.boot_seconds(), nodeid))


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Nothing the suite started may outlive it. Runs after the session's fixtures are torn
    down (the lab and its hosts are gone). The connection holders the suite's commands left
    (they outlive a command by --persist seconds, by design) are ended here; any other process
    carrying this session's marker fails the run, is named with the test it started during,
    and is ended too, so that nothing is left behind either way."""
    shutil.rmtree(STATE_HOME, ignore_errors=True)
    token = SESSION
    found = leftovers.session_processes(token)
    holders = [p for p in found if p.is_holder]
    leftovers.end(p.pid for p in holders)
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if holders and reporter is not None:
        reporter.write("\n")
        reporter.write_line(f"ended the connection holder(s) the suite's commands left: pid "
                            f"{', '.join(str(p.pid) for p in holders)}")
    left = leftovers.wait_gone(token, timeout_s=10.0)
    if not left:
        return
    lines = [f"error: {len(left)} process(es) the test session started still run "
             f"({leftovers.SESSION_VAR}={token}); ended now:"]
    lines += [f"  {p.describe()}\n    started during {_started_during(p.started_s)}"
              for p in sorted(left, key=lambda p: p.started_s)]
    leftovers.end(p.pid for p in left)
    if reporter is not None:
        reporter.write("\n")
    for line in lines:
        if reporter is not None:
            reporter.write_line(line, red=True)
        else:
            print(line)
    if session.exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED):
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def _started_during(started_s: float) -> str:
    before = [nodeid for at, nodeid in _test_starts if at <= started_s + 0.01]
    return before[-1] if before else "the session's start (before any test)"
