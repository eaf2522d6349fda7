"""Shared test setup: the SSH test lab's fixtures (tests/lab) and stopping what a test started."""

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.labtools import tfctl

pytest_plugins = ["tests.lab.fixtures"]

# Commands keep no connections for the next one unless a test asks (tests/test_lab_hold.py):
# a holder from one test would serve the next test's commands, whose lab may have changed.
# TFCTL_TEST_PERSIST=60 runs the whole suite the way users' commands run by default.
os.environ["TFCTL_PERSIST"] = os.environ.get("TFCTL_TEST_PERSIST", "0")


@pytest.fixture
def down_after() -> Iterator[list[Path]]:
    """Inventories a test appends here get `tfctl down` afterwards, pass or fail, so the next
    test's `up` finds no live run."""
    inventories: list[Path] = []
    yield inventories
    for inv in inventories:
        tfctl(inv, "down", "--grace", "1")


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
