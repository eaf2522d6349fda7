"""Where tfctl remembers a user's current run (remote/runs/current.py): in the user's state
folder, one file per inventory's real path; an older tfctl's file beside the inventory read once
and moved, when it is the user's; a folder that cannot be written is one sentence."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.support.localcluster import local_cluster
from tfctl.inventory.load import load_inventory
from tfctl.remote.runs.current import (
    StateUnwritable,
    check_state_writable,
    legacy_state_path,
    read_state,
    remember,
    state_dir,
    state_file,
    state_path,
)


@pytest.fixture
def state_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "state"
    monkeypatch.setenv("XDG_STATE_HOME", str(home))
    return home


def test_the_state_folder_is_xdg_state_home_else_local_state(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "s"))
    assert state_dir() == str(tmp_path / "s" / "tfctl")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    for unset in ("", "relative/state"):  # the specification: a relative path is ignored
        monkeypatch.setenv("XDG_STATE_HOME", unset)
        assert state_dir() == str(tmp_path / "home" / ".local" / "state" / "tfctl")


def test_one_file_per_real_path_never_beside_the_inventory(state_home: Path,
                                                          tmp_path: Path) -> None:
    inv_path = local_cluster(tmp_path, {"a": {}})
    link = tmp_path / "link.yaml"
    link.symlink_to(inv_path)
    other = local_cluster(tmp_path / "other", {"a": {}})
    assert state_file(str(link), "loc") == state_file(str(inv_path), "loc")
    assert state_file(str(other), "loc") != state_file(str(inv_path), "loc")
    inv = load_inventory(inv_path)
    remember(inv, "20260101-000000-abcd", ("a",))
    written = Path(state_path(inv))
    assert written.parent == state_home / "tfctl" and written.name.startswith("loc-")
    assert json.loads(written.read_text()) == {
        "run_id": "20260101-000000-abcd", "inventory": str(inv_path.resolve()), "hosts": ["a"]}
    assert read_state(inv) == json.loads(written.read_text())
    assert sorted(p.name for p in inv_path.parent.iterdir()) == ["cluster.yaml", "job.py"]


def test_a_state_file_beside_the_inventory_is_read_once_and_moved(state_home: Path,
                                                                 tmp_path: Path) -> None:
    inv = load_inventory(local_cluster(tmp_path, {"a": {}}))
    old = Path(legacy_state_path(inv))
    old.write_text(json.dumps({"run_id": "20250101-000000-0000", "hosts": ["a"]}))
    assert read_state(inv) == {"run_id": "20250101-000000-0000", "hosts": ["a"]}
    assert not old.exists()
    assert json.loads(Path(state_path(inv)).read_text())["run_id"] == "20250101-000000-0000"
    remember(inv, "20260101-000000-abcd", ("a",))
    assert read_state(inv)["run_id"] == "20260101-000000-abcd"  # type: ignore[index]


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another user needs root")
def test_another_users_state_file_beside_a_shared_inventory_is_not_theirs(
        state_home: Path, tmp_path: Path) -> None:
    inv = load_inventory(local_cluster(tmp_path, {"a": {}}))
    old = Path(legacy_state_path(inv))
    old.write_text(json.dumps({"run_id": "20250101-000000-0000", "hosts": ["a"]}))
    os.chown(old, 65534, 65534)
    assert read_state(inv) is None
    assert old.exists()


def test_a_state_folder_that_cannot_be_written_is_one_sentence(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv("XDG_STATE_HOME", str(blocker / "state"))  # below a file: ENOTDIR
    inv = load_inventory(local_cluster(tmp_path, {"a": {}}))
    with pytest.raises(StateUnwritable) as before:
        check_state_writable(inv)
    said = str(before.value)
    assert said.startswith(f"cannot write tfctl's state folder {blocker}/state/tfctl (")
    assert "XDG_STATE_HOME" in said and said.endswith("nothing was started")
    with pytest.raises(StateUnwritable) as after:
        remember(inv, "20260101-000000-abcd", ("a",))
    said = str(after.value)
    assert said.startswith("run 20260101-000000-abcd started, but tfctl could not write ")
    assert said.endswith("`tfctl down` finds it on the hosts and stops it")
    assert "\n" not in said
