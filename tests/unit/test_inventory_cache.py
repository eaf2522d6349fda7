"""The cache of validated inventories (inventory/cache.py): a hit skips YAML and pydantic, and
any change of the file, its machinefile or the code is a miss; broken files are never cached."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tfctl.inventory import InventoryError, load_inventory
from tfctl.inventory import cache as cache_mod
from tfctl.inventory.cache import cache_dir, load_inventory_cached

INVENTORY = """\
name: lab
defaults: {user: alice, python: python3}
hosts:
  - {name: titan, address: 192.168.0.80, gpus: 2}
job: {script: train.py}
"""
PROBE = """
import json, sys
from tfctl.inventory.cache import load_inventory_cached
inv = load_inventory_cached(sys.argv[1])
print(json.dumps({"hosts": [h.name for h in inv.hosts], "gpus": [list(h.gpus) for h in inv.hosts],
                  "validated": "pydantic" in sys.modules or "yaml" in sys.modules}))
"""


@pytest.fixture(autouse=True)
def private_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("TFCTL_INVENTORY_CACHE", raising=False)
    return tmp_path / "cache"


def probe(path: Path) -> dict[str, object]:
    proc = subprocess.run([sys.executable, "-c", PROBE, str(path)], capture_output=True,
                          text=True, check=True, env=dict(os.environ))
    result: dict[str, object] = json.loads(proc.stdout)
    return result


def test_a_second_load_skips_yaml_and_pydantic(tmp_path: Path) -> None:
    inv = tmp_path / "cluster.yaml"
    inv.write_text(INVENTORY)
    first, second = probe(inv), probe(inv)
    assert first == {"hosts": ["titan"], "gpus": [[0, 1]], "validated": True}
    assert second == {"hosts": ["titan"], "gpus": [[0, 1]], "validated": False}


def test_a_hit_equals_a_fresh_load(tmp_path: Path) -> None:
    inv = tmp_path / "cluster.yaml"
    inv.write_text(INVENTORY)
    load_inventory_cached(inv)
    assert load_inventory_cached(inv) == load_inventory(inv)


def test_a_hit_keeps_the_name_it_was_asked_by(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """Paths in the inventory are relative to its folder: a hit must not carry the name it was
    first loaded by (relative to another working directory)."""
    inv = tmp_path / "cluster.yaml"
    inv.write_text(INVENTORY)
    monkeypatch.chdir(tmp_path)
    assert load_inventory_cached("cluster.yaml").base_dir == str(tmp_path)
    monkeypatch.chdir("/")
    hit = load_inventory_cached(str(inv))
    assert hit.path == str(inv) and hit.base_dir == str(tmp_path)


def test_an_edited_file_is_validated_again(tmp_path: Path) -> None:
    inv = tmp_path / "cluster.yaml"
    inv.write_text(INVENTORY)
    probe(inv)
    inv.write_text(INVENTORY.replace("gpus: 2", "gpus: 3"))
    assert probe(inv) == {"hosts": ["titan"], "gpus": [[0, 1, 2]], "validated": True}


def test_a_changed_machinefile_is_read_again(tmp_path: Path) -> None:
    hostfile = tmp_path / "machines"
    hostfile.write_text("gtx1 slots=1\n")
    inv = tmp_path / "cluster.yaml"
    inv.write_text(INVENTORY.replace("hosts:\n  - {name: titan, address: 192.168.0.80, gpus: 2}",
                                     "hostfile: machines"))
    assert [h.name for h in load_inventory_cached(inv).hosts] == ["gtx1"]
    assert probe(inv)["validated"] is False
    hostfile.write_text("gtx1 slots=1\ngtx2 slots=2\n")
    assert probe(inv) == {"hosts": ["gtx1", "gtx2"], "gpus": [[0], [0, 1]], "validated": True}


def test_a_broken_file_is_never_cached(tmp_path: Path, private_cache: Path) -> None:
    inv = tmp_path / "cluster.yaml"
    inv.write_text(INVENTORY.replace("gpus: 2", "gpus: two"))
    for _ in range(2):
        with pytest.raises(InventoryError, match="gpus"):
            load_inventory_cached(inv)
    assert not any((private_cache / "tfctl" / "inventories").iterdir())


def test_a_damaged_entry_is_a_miss(tmp_path: Path, private_cache: Path) -> None:
    inv = tmp_path / "cluster.yaml"
    inv.write_text(INVENTORY)
    load_inventory_cached(inv)
    (entry,) = (private_cache / "tfctl" / "inventories").iterdir()
    entry.write_bytes(b"not a pickle")
    assert load_inventory_cached(inv).hosts[0].gpus == (0, 1)
    assert entry.read_bytes() != b"not a pickle"  # written again


def test_a_folder_others_can_write_is_not_used(tmp_path: Path, private_cache: Path) -> None:
    folder = private_cache / "tfctl" / "inventories"
    folder.mkdir(parents=True)
    folder.chmod(0o777)
    assert cache_dir() is None
    inv = tmp_path / "cluster.yaml"
    inv.write_text(INVENTORY)
    assert load_inventory_cached(inv).name == "lab"
    assert not any(folder.iterdir())


def test_old_entries_are_pruned(tmp_path: Path, private_cache: Path,
                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cache_mod, "MAX_ENTRIES", 3)
    for n in range(5):
        inv = tmp_path / f"c{n}.yaml"
        inv.write_text(INVENTORY.replace("name: lab", f"name: lab{n}"))
        load_inventory_cached(inv)
    assert len(list((private_cache / "tfctl" / "inventories").iterdir())) == 3


def test_the_cache_can_be_turned_off(tmp_path: Path, private_cache: Path,
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TFCTL_INVENTORY_CACHE", "0")
    inv = tmp_path / "cluster.yaml"
    inv.write_text(INVENTORY)
    load_inventory_cached(inv)
    assert not (private_cache / "tfctl").exists()
