"""The host side of ports chosen at `up` (remote/agent/freeports.py), on this machine's sockets:
a usual port kept where free, a taken one replaced by the range's lowest free port, leases that
keep two `up`s apart, and the last look before the start."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from tfctl.remote.agent import freeports


@pytest.fixture(autouse=True)
def leases(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "leases"
    monkeypatch.setattr(freeports, "LEASE_DIR", str(folder))
    return folder


@pytest.fixture
def block() -> Iterator[tuple[int, int]]:
    """Three free consecutive ports (low, high) of this machine, none listening."""
    for start in range(41000, 42000, 3):
        if all(freeports.bindable(p) for p in range(start, start + 3)):
            yield start, start + 2
            return
    pytest.skip("no three free consecutive ports")


def _listen(port: int) -> socket.socket:
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("0.0.0.0", port))
    s.listen()
    return s


def test_the_usual_port_is_kept_where_it_is_free(block: tuple[int, int]) -> None:
    low, high = block
    got = freeports.choose_ports([{"task": "ps:0", "preferred": high}], low, high)
    assert got == {"chosen": {"ps:0": high}, "short": []}


def test_a_taken_port_gives_the_lowest_free_one_of_the_range(block: tuple[int, int]) -> None:
    low, high = block
    with _listen(low):
        got = freeports.choose_ports([{"task": "ps:0", "preferred": low},
                                      {"task": "worker:0", "preferred": low + 1}], low, high)
        assert got == {"chosen": {"ps:0": low + 1, "worker:0": high}, "short": []}
        assert freeports.taken_since([low, low + 1]) == [low]


def test_the_runs_written_ports_are_never_chosen(block: tuple[int, int]) -> None:
    low, high = block
    got = freeports.choose_ports([{"task": "worker:0", "preferred": low}], low, high,
                                 fixed=[low, low + 1])
    assert got["chosen"] == {"worker:0": high}


def test_no_free_port_left_is_said(block: tuple[int, int]) -> None:
    low, high = block
    with _listen(low), _listen(low + 1), _listen(high):
        got = freeports.choose_ports([{"task": "ps:0", "preferred": low}], low, high)
    assert got == {"chosen": {}, "short": ["ps:0"]}


def test_a_lease_keeps_another_up_off_until_released(block: tuple[int, int],
                                                     leases: Path) -> None:
    low, high = block
    first = freeports.choose_ports([{"task": "ps:0", "preferred": low}], low, high, token="a")
    assert first["chosen"] == {"ps:0": low}  # nothing listens yet: TensorFlow still imports
    again = freeports.choose_ports([{"task": "ps:0", "preferred": low}], low, high, token="a")
    assert again["chosen"] == {"ps:0": low}  # the same up's second check keeps its port
    other = freeports.choose_ports([{"task": "ps:0", "preferred": low}], low, high, token="b")
    assert other["chosen"] == {"ps:0": low + 1}  # another up takes the next one
    freeports.release("a")
    freeports.release("b")
    assert list(leases.iterdir()) == []
    assert freeports.choose_ports([{"task": "ps:0", "preferred": low}], low, high,
                                  token="c")["chosen"] == {"ps:0": low}


def test_a_lease_that_is_a_symlink_or_garbage_is_no_lease(block: tuple[int, int],
                                                          leases: Path,
                                                          tmp_path: Path) -> None:
    low, high = block
    leases.mkdir()
    target = tmp_path / "elsewhere.json"
    target.write_text('{"token": "x", "until": 9999999999}')
    (leases / Path(freeports._lease_path(low)).name).symlink_to(target)
    (leases / Path(freeports._lease_path(low + 1)).name).write_text("not json")
    got = freeports.choose_ports([{"task": "ps:0", "preferred": low},
                                  {"task": "ps:1", "preferred": low + 1}], low, high)
    assert got["chosen"] == {"ps:0": low, "ps:1": low + 1}
