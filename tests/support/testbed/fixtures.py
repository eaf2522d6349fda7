"""Pytest fixtures for the testbed, the suite's SSH hosts; loaded with
`pytest_plugins = ["tests.support.testbed.fixtures"]`.

One testbed serves the whole session (starting it costs well under a second, but tests run faster
sharing it); tests that break a host ask for `testbed_hosts_healed` so the next test finds it whole.
"""

from __future__ import annotations

import os
import shutil
import signal
from collections.abc import Callable, Iterator

import pytest

from tests.support.testbed.testbed import SSHD_PRESENT, Testbed
from tests.support.testbed.users import ALICE, BOB, CAROL

TESTBED_HOSTS = ("h1", "h2", "h3")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tests that use the testbed get the `testbed` marker even when they forget `pytestmark`."""
    for item in items:
        names = set(getattr(item, "fixturenames", ()))
        if {"testbed", "testbed_hosts_healed", "healed", "isolated_testbed",
                "shared_testbed"} & names:
            item.add_marker(pytest.mark.testbed)


@pytest.fixture(scope="session")
def testbed() -> Iterator[Testbed]:
    """Three hosts h1, h2, h3 (namespaces on a bridge as root; loopback sshds otherwise)."""
    if not SSHD_PRESENT or shutil.which("ssh-keygen") is None:
        pytest.skip("the testbed needs OpenSSH (sshd and ssh-keygen) installed")
    with Testbed(TESTBED_HOSTS) as the_testbed:
        yield the_testbed


@pytest.fixture
def testbed_hosts_healed(testbed: Testbed) -> Iterator[Testbed]:
    """The session testbed, made whole after the test: links healed, sshds up, keys restored."""
    yield testbed
    testbed.reset()


@pytest.fixture
def healed(testbed_hosts_healed: Testbed) -> Testbed:
    """Short name for `testbed_hosts_healed`."""
    return testbed_hosts_healed


@pytest.fixture
def isolated_testbed(testbed_hosts_healed: Testbed) -> Testbed:
    """The session testbed when it can do network faults (root mode); else the test is skipped."""
    if not testbed_hosts_healed.isolated:
        pytest.skip("needs the network-namespace lab (root and `ip netns`)")
    return testbed_hosts_healed


@pytest.fixture
def shared_testbed(testbed: Testbed) -> Iterator[Testbed]:
    """The testbed shared by alice, bob and carol (real Unix users, `testbed.users`), with two
    stand-in GPUs on h1 and on h2 that every user sees; skipped outside the network-namespace
    testbed."""
    if not testbed.isolated:
        pytest.skip("needs the network-namespace lab (root)")
    for name in (ALICE, BOB, CAROL):
        testbed.add_user(name)
    yield from _two_gpus_on_h1_h2(testbed, testbed.install_gpus)


@pytest.fixture
def gpu_testbed(testbed: Testbed) -> Iterator[Testbed]:
    """The testbed with two stand-in GPUs on h1 and two on h2 (`Testbed.standin_gpus`); h3 has
    no nvidia-smi at all, a CPU-only host."""
    yield from _two_gpus_on_h1_h2(testbed, testbed.standin_gpus)


def _two_gpus_on_h1_h2(testbed: Testbed, install: Callable[[str, int], object]
                       ) -> Iterator[Testbed]:
    """The testbed while h1 and h2 have two stand-in GPUs each, put there by `install`."""
    for host in ("h1", "h2"):
        install(host, 2)
    yield testbed
    for host in ("h1", "h2"):
        testbed.remove_from_path(host, "nvidia-smi")


@pytest.fixture
def stranger(testbed: Testbed) -> Iterator[Callable[..., int]]:
    """`stranger(host, gpu=0)`: the pid of another user's job holding that GPU of a testbed
    host (`Testbed.start_on_gpu`); every one is killed after the test."""
    started: list[int] = []

    def start(host: str, gpu: int = 0) -> int:
        started.append(testbed.start_on_gpu(host, gpu))
        return started[-1]

    yield start
    for pid in started:
        os.kill(pid, signal.SIGKILL)
