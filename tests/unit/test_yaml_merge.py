"""YAML anchors, aliases and merge keys (`<<: *box`) in inventories, with every line still right.

Merge keys are YAML 1.1's (https://yaml.org/type/merge.html) and what `yaml.safe_load` does with
them is the reference: the keys written beside `<<` win, then the first mapping merged.
"""

from __future__ import annotations

import textwrap

import pytest
import yaml

from tfctl.inventory import InventoryError, parse_inventory
from tfctl.inventory.yamlmarks import load_with_lines

MERGES = {
    "one": "a: &a {x: 1, y: 2}\nb:\n  <<: *a\n  y: 3\n",
    "key after": "a: &a {x: 1, y: 2}\nb:\n  y: 3\n  <<: *a\n",
    "a list": "a: &a {x: 1}\nb: &b {x: 2, z: 3}\nc: {<<: [*a, *b], w: 0}\n",
    "nested": "a: &a {x: 1}\nb: &b {<<: *a, y: 2}\nc: {<<: *b, z: 3}\n",
    "in a list item": "a: &a {gpus: 4}\nhosts:\n  - {<<: *a, name: t}\n  - <<: *a\n    name: u\n",
    "an alias": "a: &a [1, 2]\nb: *a\n",
    "anchored scalar": "a: &p 22\nb: {port: *p}\n",
    "merged mapping holds a list": "a: &a {args: [--x, --y]}\nb: {<<: *a}\n",
}


@pytest.mark.parametrize("text", MERGES.values(), ids=MERGES.keys())
def test_merges_as_safe_load_does(text: str) -> None:
    data, _ = load_with_lines(text, "c.yaml")
    assert data == yaml.safe_load(text)


def test_merged_keys_keep_the_line_they_are_written_on() -> None:
    text = "a: &a\n  x: 1\n  y: 2\nb:\n  <<: *a\n  y: 3\n"
    data, lines = load_with_lines(text, "c.yaml")
    assert data["b"] == {"x": 1, "y": 3}
    assert lines[("b",)] == 4
    assert lines[("b", "y")] == 6  # written here, wins over the merged one
    assert lines[("b", "x")] == 2  # merged: the line in the anchored mapping
    assert ("b", "<<") not in lines


INVENTORY = """\
x-gpu-box: &box
  gpus: 4
  workdir: /data/tfctl
  python: /opt/tf/bin/python
hosts:
  - <<: *box
    name: titan
  - <<: *box
    name: titan2
    gpus: [0, 1]
job: {script: train.py}
"""


def test_an_inventory_with_merge_keys_loads() -> None:
    inv = parse_inventory("name: lab\n" + INVENTORY, "c.yaml")
    titan, titan2 = inv.hosts
    assert (titan.gpus, titan.workdir, titan.python) == ((0, 1, 2, 3), "/data/tfctl",
                                                         "/opt/tf/bin/python")
    assert (titan2.gpus, titan2.workdir) == ((0, 1), "/data/tfctl")


def test_the_readme_example_loads() -> None:
    text = ("name: lab\n"
            "x-gpu-box: &gpu-box {gpus: 4, workdir: /data/tfctl, python: /opt/tf/bin/python}\n"
            "hosts:\n"
            "  - {<<: *gpu-box, name: titan}\n"
            "  - {<<: *gpu-box, name: titan2, gpus: [0, 1]}\n"
            "job: {script: train.py}\n")
    assert [h.gpus for h in parse_inventory(text, "c.yaml").hosts] == [(0, 1, 2, 3), (0, 1)]


def error(text: str) -> InventoryError:
    with pytest.raises(InventoryError) as info:
        parse_inventory(textwrap.dedent(text), "c.yaml")
    return info.value


def test_a_mistake_in_a_merged_mapping_names_its_line_and_the_host() -> None:
    e = error("name: lab\n" + INVENTORY.replace("gpus: 4", "gpus: four"))
    assert (e.line, e.key_path) == (3, "hosts[0].gpus")  # where it is written; the first host


def test_a_mistake_beside_the_merge_names_its_own_line() -> None:
    e = error("name: lab\n" + INVENTORY.replace("gpus: [0, 1]", "gpus: [0, 0]"))
    assert (e.line, e.key_path) == (11, "hosts[1].gpus")  # not the merged `gpus: 4` (line 3)
    assert "listed twice" in e.message


BAD_MERGES: dict[str, tuple[str, int, str, str]] = {
    "a scalar": ("name: lab\nx-p: &p 22\nhosts:\n  - <<: *p\n    name: a\njob: {script: t.py}\n",
                 2, "hosts[0].<<", "not the value '22'"),
    "a plain scalar": ("name: lab\nhosts:\n  - name: a\n    <<: 5\njob: {script: t.py}\n",
                       4, "hosts[0].<<", "not the value '5'"),
    "a list of scalars": ("name: lab\nx-a: &a {gpus: 1}\nhosts:\n  - <<: [*a, 7]\n    name: a\n"
                          "job: {script: t.py}\n", 4, "hosts[0].<<", "not the value '7'"),
    "a list of lists": ("name: lab\nhosts:\n  - name: a\n    <<: [[1]]\njob: {script: t.py}\n",
                        4, "hosts[0].<<", "not a list"),
    "twice": ("name: lab\nx-a: &a {gpus: 1}\nhosts:\n  - <<: *a\n    <<: *a\n    name: a\n"
              "job: {script: t.py}\n", 5, "hosts[0].<<", "appears twice"),
}


@pytest.mark.parametrize(("text", "line", "key", "what"), BAD_MERGES.values(),
                         ids=BAD_MERGES.keys())
def test_an_invalid_merge_is_a_located_error(text: str, line: int, key: str, what: str) -> None:
    e = error(text)
    assert (e.path, e.line, e.key_path) == ("c.yaml", line, key)
    assert what in e.message and "<<" in e.message
    assert str(e).startswith(f"c.yaml:{line}: {key}:")


def test_an_unknown_top_level_key_is_still_refused_unless_it_starts_with_x() -> None:
    e = error("name: lab\nxgpu: {gpus: 1}\nhosts: [{name: a}]\njob: {script: t.py}\n")
    assert (e.line, e.key_path, e.message) == (2, "xgpu", "unknown key")


def test_merged_aliases_of_aliases_are_still_bounded() -> None:
    bomb = "a: &a {" + ", ".join(f"k{i}: [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]" for i in range(10)) + "}\n"
    for prev, name in zip("abcde", "bcdef", strict=True):
        keys = ", ".join(f"m{i}: *{prev}" for i in range(10))
        bomb += f"{name}: &{name} {{<<: *{prev}, {keys}}}\n"
    with pytest.raises(InventoryError, match="expands to more than"):
        load_with_lines(bomb, "c.yaml")
