"""Inventory loading: the contract example resolves; every class of mistake is located (exit 2)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tfctl.inventory import InventoryError, load_inventory, parse_inventory
from tfctl.inventory.hostfile import parse_hostfile

EXAMPLE = Path(__file__).parents[2] / "examples" / "two-hosts.yaml"

GOOD = """\
name: lab
defaults:
  user: alice
  workdir: ~/tfctl/lab
hosts:
  - name: titan
    address: 192.168.0.80
    gpus: 4
  - name: gtx970
    address: 192.168.0.20
    gpus: [0]
    workdir: /data/tfctl
job:
  script: train.py
"""


def err(text: str) -> InventoryError:
    with pytest.raises(InventoryError) as info:
        parse_inventory(textwrap.dedent(text), "c.yaml")
    return info.value


def test_example_resolves_defaults_and_overrides() -> None:
    inv = load_inventory(EXAMPLE)
    titan, gtx = inv.hosts
    assert (titan.user, titan.workdir, titan.gpus, titan.ps) == (None, "~/tfctl/lab",
                                                                (0, 1, 2, 3), 1)  # ~/.ssh/config's
    assert gtx.workdir == "/data/tfctl" and gtx.gpus == (0,)
    assert dict(gtx.env) == {"TF_CPP_MIN_LOG_LEVEL": "1"}
    assert inv.job.tensorboard is not None and inv.job.tensorboard.port == 6006


def test_address_defaults_to_name() -> None:
    inv = parse_inventory("name: x\nhosts: [{name: box}]\njob: {script: t.py}\n")
    assert inv.hosts[0].address == "box" and inv.hosts[0].gpus == ()


@pytest.mark.parametrize(
    ("text", "line", "key", "words"),
    [
        ("name: x\nhosts: [\n", 3, "", "not valid YAML"),
        (GOOD.replace("  user: alice", "  usr: alice"), 3, "defaults.usr", "did you mean `user`"),
        (GOOD.replace("    gpus: 4", "    gpus: four"), 8, "hosts[0].gpus", "a count"),
        (GOOD.replace("  - name: gtx970", "  - name: titan"), 9, "hosts[1].name", "unique"),
        (GOOD.replace("gpus: [0]", "gpus: [0, 1, 0]"), 11, "hosts[1].gpus", "listed twice"),
        (GOOD + "  chief: nosuch\n", 15, "job.chief", "no host is named"),
        (GOOD + "  evaluator: {host: titn, script: e.py}\n", 15, "job.evaluator.host",
         "did you mean `titan`"),
        (GOOD + "  tensorboard: {host: zzz}\n", 15, "job.tensorboard.host", "no host"),
        (GOOD.replace("    gpus: 4", "    gpus: 4\n    ps: 2"), 14, "job.ports.worker",
         "both listen on port 2223"),
        (GOOD + "  tensorboard: {host: titan, port: 2223}\n", 15, "job.tensorboard.port",
         "port 2223"),
        (GOOD + "  ports: {ps: 70000}\n", 15, "job.ports.ps", "65535"),
        (GOOD + "  style: mpi\n", 15, "job.style", "tf_config"),
        (GOOD + "  style: flags\n  chief: true\n", 16, "job.chief", "flags"),
        (GOOD.replace("  user: alice", "  port: '22'"), 3, "defaults.port", "number"),
        ("name: x\nname: y\nhosts: []\njob: {script: t}\n", 2, "name", "twice"),
        ("- a\n- b\n", 1, "", "not a mapping"),
        ("", None, "", "empty"),
        (GOOD.replace("hosts:\n", "hosts: []\nfoo:\n"), 6, "foo", "unknown key"),
        (GOOD + "  silence_window: 0\n", 15, "job.silence_window", "greater than or equal to 1"),
        (GOOD + "  silence_window: soon\n", 15, "job.silence_window", "number"),
    ],
)
def test_each_mistake_is_located(text: str, line: int | None, key: str, words: str) -> None:
    e = err(text)
    if line is not None:
        assert e.line == line, str(e)
    assert e.key_path == key or not key, str(e)
    assert words in str(e), str(e)
    assert str(e).startswith("c.yaml:"), str(e)


def test_silence_window_reaches_every_host_s_end_rule() -> None:
    from tfctl.inventory.plan import make_plan
    from tfctl.remote.runs.endrule import end_rule

    assert parse_inventory(GOOD, "c.yaml").job.silence_window_s == 600.0  # minutes: an outage
    inv = parse_inventory(GOOD + "  silence_window: 90\n", "c.yaml")
    assert end_rule(make_plan(inv), 180.0)["silence_window_s"] == 90.0


@pytest.mark.parametrize(("value", "seconds"), [
    (None, 20.0), ("3", 3.0), ("0.5", 0.5), ("0", 20.0), ("-4", 20.0), ("soon", 20.0),
    ("nan", 20.0), ("1e9", 20.0)])
def test_a_refused_port_is_an_end_after_20_s_unless_the_environment_says_less(
        monkeypatch: pytest.MonkeyPatch, value: str | None, seconds: float) -> None:
    from tfctl.remote.runs import endrule

    if value is None:
        monkeypatch.delenv("TFCTL_CLOSED_FOR_GOOD_S", raising=False)
    else:
        monkeypatch.setenv("TFCTL_CLOSED_FOR_GOOD_S", value)
    assert endrule._closed_for_good_default() == seconds


def test_missing_file_and_directory(tmp_path: Path) -> None:
    with pytest.raises(InventoryError, match="no such file — create one with `tfctl init`"):
        load_inventory(tmp_path / "nope.yaml")
    with pytest.raises(InventoryError, match="is a directory"):
        load_inventory(tmp_path)


def test_binary_garbage_and_non_utf8(tmp_path: Path) -> None:
    f = tmp_path / "c.yaml"
    f.write_bytes(b"name: x\n\xff\xfe\x00garbage")
    with pytest.raises(InventoryError, match=r"c.yaml:2: is not UTF-8"):
        load_inventory(f)
    with pytest.raises(InventoryError, match="binary data"):
        parse_inventory("name: x\n\x00", "c.yaml")


def test_hostfile_formats() -> None:
    assert parse_hostfile("a slots=4 max_slots=4\nb slots=1\n# c\nd\n") == [
        {"name": "a", "gpus": 4}, {"name": "b", "gpus": 1}, {"name": "d", "gpus": 0}]
    assert parse_hostfile("h1:4,h2:2") == [{"name": "h1", "gpus": 4}, {"name": "h2", "gpus": 2}]
    with pytest.raises(InventoryError, match="hostfile:1"):
        parse_hostfile("a slot=4")


def test_hostfile_key_replaces_hosts(tmp_path: Path) -> None:
    (tmp_path / "machines").write_text("gpu1 slots=2\ngpu2 slots=1\n")
    (tmp_path / "c.yaml").write_text("name: x\nhostfile: machines\njob: {script: t.py}\n")
    inv = load_inventory(tmp_path / "c.yaml")
    assert [(h.name, h.gpus) for h in inv.hosts] == [("gpu1", (0, 1)), ("gpu2", (0,))]


def test_cli_error_is_one_line_exit_2(tmp_path: Path) -> None:
    f = tmp_path / "c.yaml"
    f.write_text(GOOD.replace("    gpus: 4", "    gpus: -1"))
    proc = subprocess.run([sys.executable, "-m", "tfctl.tui", "-i", str(f), "plan"],
                          capture_output=True, text=True)
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0, proc.stderr
    assert f"{f}:8: hosts[0].gpus:" in proc.stderr and "Traceback" not in proc.stderr
