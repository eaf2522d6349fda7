"""The `ssh -G` answers kept on disk (remote/connect/openssh.py): the file is parsed once per
process while it is unchanged, however many hosts a command resolves, and read again once
another process (or this one) replaced it."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tfctl.remote.connect import openssh


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setattr(openssh, "_disk_read", {})
    path = tmp_path / "tfctl" / "ssh-G.json"
    path.parent.mkdir()
    path.write_text(json.dumps({"k1": {"hostname": ["a"]}, "k2": {"hostname": ["b"]}}))
    return path


def test_the_file_is_parsed_once_while_unchanged(cache: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    parsed: list[int] = []
    real = json.loads

    def counted(data: bytes | str) -> object:
        parsed.append(len(data))
        return real(data)

    monkeypatch.setattr(openssh.json, "loads", counted)
    assert [openssh._disk_get(k) for k in ("k1", "k2", "k1", "k3")] == [
        {"hostname": ["a"]}, {"hostname": ["b"]}, {"hostname": ["a"]}, None]
    assert len(parsed) == 1


def test_a_replaced_file_is_read_again(cache: Path) -> None:
    assert openssh._disk_get("k1") == {"hostname": ["a"]}
    tmp = cache.with_name("new")
    tmp.write_text(json.dumps({"k1": {"hostname": ["c"]}}))
    os.replace(tmp, cache)  # as _disk_put writes it
    assert openssh._disk_get("k1") == {"hostname": ["c"]}
    cache.unlink()
    assert openssh._disk_get("k1") is None
