"""`tfctl init` writes a commented inventory that loads and plans, from --hosts or a hostfile."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from tfctl.inventory import load_inventory, make_plan
from tfctl.tui.cli.main import main


def test_init_from_hosts_loads_and_plans(tmp_path: Path) -> None:
    path = tmp_path / "cluster.yaml"
    result = CliRunner().invoke(main, ["-i", str(path), "init", "--hosts", "titan:4,gtx970:1"])
    assert result.exit_code == 0, result.output
    assert "# tfctl inventory" in path.read_text()
    plan = make_plan(load_inventory(path))
    assert plan.cluster["ps"] == ["titan:2222"]
    assert plan.cluster["worker"] == ["titan:2223", "titan:2224", "titan:2225", "titan:2226",
                                      "gtx970:2223"]
    again = CliRunner().invoke(main, ["-i", str(path), "init"])
    assert again.exit_code == 2 and "--force" in again.output


def test_init_from_a_machinefile(tmp_path: Path) -> None:
    (tmp_path / "machines").write_text("a slots=2\nb slots=0\n")
    path = tmp_path / "c.yaml"
    result = CliRunner().invoke(main, ["-i", str(path), "init", "--from-hostfile",
                                       str(tmp_path / "machines")])
    assert result.exit_code == 0, result.output
    inv = load_inventory(path)
    assert [(h.name, h.gpus) for h in inv.hosts] == [("a", (0, 1)), ("b", ())]
