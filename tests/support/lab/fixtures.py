"""Pytest fixtures for the lab, loaded with `pytest_plugins = ["tests.support.lab.fixtures"]`.

One lab serves the whole session (starting it costs well under a second, but tests run faster
sharing it); tests that break a host ask for `lab_hosts_healed` so the next test finds it whole.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator

import pytest

from tests.support.lab.lab import SSHD_PRESENT, Lab
from tests.support.lab.users import ALICE, BOB, CAROL

LAB_HOSTS = ("h1", "h2", "h3")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tests that use the lab get the `lab` marker even when they forget `pytestmark`."""
    for item in items:
        if {"lab", "lab_hosts_healed", "healed", "isolated_lab"} & set(
            getattr(item, "fixturenames", ())
        ):
            item.add_marker(pytest.mark.lab)


@pytest.fixture(scope="session")
def lab() -> Iterator[Lab]:
    """Three hosts h1, h2, h3 (namespaces on a bridge as root; loopback sshds otherwise)."""
    if not SSHD_PRESENT or shutil.which("ssh-keygen") is None:
        pytest.skip("the lab needs OpenSSH (sshd and ssh-keygen) installed")
    with Lab(LAB_HOSTS) as the_lab:
        yield the_lab


@pytest.fixture
def lab_hosts_healed(lab: Lab) -> Iterator[Lab]:
    """The session lab, made whole again after the test: links healed, sshds up, keys restored."""
    yield lab
    lab.reset()


@pytest.fixture
def healed(lab_hosts_healed: Lab) -> Lab:
    """Short name for `lab_hosts_healed`."""
    return lab_hosts_healed


@pytest.fixture
def isolated_lab(lab_hosts_healed: Lab) -> Lab:
    """The session lab when it can do network faults (root mode); the test is skipped otherwise."""
    if not lab_hosts_healed.isolated:
        pytest.skip("needs the network-namespace lab (root and `ip netns`)")
    return lab_hosts_healed


@pytest.fixture
def shared_lab(lab: Lab) -> Iterator[Lab]:
    """The lab shared by alice, bob and carol (real Unix users, `lab.users`), with two stand-in
    GPUs on h1 and on h2 that every user sees; skipped outside the network-namespace lab."""
    if not lab.isolated:
        pytest.skip("needs the network-namespace lab (root)")
    for name in (ALICE, BOB, CAROL):
        lab.add_user(name)
    for host in ("h1", "h2"):
        lab.install_gpus(host, 2)
    yield lab
    for host in ("h1", "h2"):
        lab.remove_from_path(host, "nvidia-smi")
