"""The group's options where people type them (`tfctl up -i lab.yaml`), `cluster.yaml` found in a
parent folder, and `tfctl init`'s advice on what to leave to ~/.ssh/config."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from tfctl.inventory import load_inventory
from tfctl.tui.cli import main as main_module
from tfctl.tui.cli.context import obj
from tfctl.tui.cli.main import COMMANDS, main, with_global_options

ROOT = Path(__file__).parents[2]
EXAMPLE = ROOT / "examples" / "two-hosts.yaml"
GLOBAL_SPELLINGS = ["-i", "--inventory", "--hostfile", "--connect-timeout",
                    "--accept-new-host-keys", "--color", "--no-color"]


def inventory(folder: Path, name: str, file: str = "cluster.yaml") -> Path:
    path = folder / file
    path.write_text(f"name: {name}\nhosts: [{{name: a, gpus: 1}}]\njob: {{script: t.py}}\n")
    return path


def plan_name(*args: str, env: dict[str, str] | None = None) -> str:
    result = CliRunner().invoke(main, [*args], env={"TFCTL_INVENTORY": None, **(env or {})})
    assert result.exit_code == 0, result.output
    return str(json.loads(result.output)["name"])


@click.command()
@click.option("--json-persist", is_flag=True, help="Print only the persist time.")
@click.pass_context
def probe(ctx: click.Context, json_persist: bool) -> None:
    """Prints the shared Context the group and the options after the command made."""
    c = obj(ctx)
    if json_persist:
        click.echo(json.dumps(c.ssh_options().persist_s))
        return
    click.echo(json.dumps([c.inventory_path, c.hostfile, c.connect_timeout_s,
                           c.accept_new_host_keys, c.color]))


@pytest.fixture
def probed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(COMMANDS, "probe", (__name__, "probe"))


def persist_of(*args: str, env: dict[str, str | None] | None = None) -> float:
    result = CliRunner().invoke(main, [*args, "--json-persist"], env=env)
    assert result.exit_code == 0, result.output
    return float(result.output)


def context_of(*args: str, env: dict[str, str] | None = None) -> list[object]:
    clean = {"TFCTL_INVENTORY": None, "TFCTL_CONNECT_TIMEOUT": None, **(env or {})}
    result = CliRunner().invoke(main, [*args], env=clean)
    assert result.exit_code == 0, result.output
    return list(json.loads(result.output))


# ---------------------------------------------------------------- A: options after the command

def test_plan_takes_the_inventory_after_the_subcommand() -> None:
    assert plan_name("plan", "-i", str(EXAMPLE), "--json") == "lab"
    assert plan_name("plan", "--json", "--inventory", str(EXAMPLE)) == "lab"


def test_after_the_subcommand_wins_then_before_then_the_environment(tmp_path: Path) -> None:
    env_file, before, after = (inventory(tmp_path, n, f"{n}.yaml") for n in ("env", "bef", "aft"))
    env = {"TFCTL_INVENTORY": str(env_file)}
    assert plan_name("-i", str(before), "plan", "--json", "-i", str(after), env=env) == "aft"
    assert plan_name("-i", str(before), "plan", "--json", env=env) == "bef"
    assert plan_name("plan", "--json", env=env) == "env"
    assert plan_name("plan", "--json", "-i", str(after), env=env) == "aft"


@pytest.mark.usefixtures("probed")
def test_every_global_option_overrides_the_shared_context_when_given_after() -> None:
    assert context_of("probe") == [None, None, 5.0, False, None]
    assert context_of("-i", "a.yaml", "--hostfile", "h", "--connect-timeout", "2",
                      "--accept-new-host-keys", "--no-color", "probe") == \
        ["a.yaml", "h", 2.0, True, False]
    assert context_of("-i", "a.yaml", "--connect-timeout", "2", "--accept-new-host-keys",
                      "probe", "--inventory", "b.yaml", "--hostfile", "g",
                      "--connect-timeout", "7", "--color") == ["b.yaml", "g", 7.0, True, True]
    assert context_of("probe", "--accept-new-host-keys", "--connect-timeout", "3") == \
        [None, None, 3.0, True, None]
    assert context_of("probe", env={"TFCTL_CONNECT_TIMEOUT": "9"})[2] == 9.0
    assert context_of("--connect-timeout", "4", "probe", env={"TFCTL_CONNECT_TIMEOUT": "9"})[2] \
        == 4.0


@pytest.mark.usefixtures("probed")
def test_persist_is_a_minute_unless_said_before_after_or_in_the_environment() -> None:
    assert persist_of("probe", env={"TFCTL_PERSIST": None}) == 60.0
    assert persist_of("probe", env={"TFCTL_PERSIST": "0"}) == 0.0
    assert persist_of("--persist", "5", "probe", env={"TFCTL_PERSIST": "0"}) == 5.0
    assert persist_of("--persist", "5", "probe", "--persist", "0") == 0.0
    result = CliRunner().invoke(main, ["--persist", "-1", "probe"])
    assert result.exit_code == 2 and "--persist" in result.output


def all_commands() -> list[list[str]]:
    ctx = click.Context(main)
    out = []
    for name in COMMANDS:
        command = main.get_command(ctx, name)
        assert command is not None
        out.append([name])
        if isinstance(command, click.Group):
            out += [[name, sub] for sub in command.commands]
    return out


@pytest.mark.parametrize("words", all_commands(), ids=" ".join)
def test_every_command_accepts_the_global_options_and_lists_them(words: list[str]) -> None:
    args = [*words, "-i", "x.yaml", "--hostfile", "h", "--connect-timeout", "3",
            "--accept-new-host-keys", "--no-color", "--help"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    section = result.output.split("Global options (before or after the command):\n", 1)[1]
    for spelling in ("-i, --inventory FILE", "--hostfile FILE", "--connect-timeout",
                     "--accept-new-host-keys", "--persist SECONDS", "--color / --no-color"):
        assert spelling in section
    assert "--help" not in section


def test_a_command_keeps_its_own_spelling_of_a_global_option() -> None:
    @click.command()
    @click.option("-i", "--interval", type=int, default=1)
    @click.option("--color", "paint")
    @click.pass_context
    def own(ctx: click.Context, interval: int, paint: str | None) -> None:
        click.echo(json.dumps([interval, paint, obj(ctx).inventory_path, obj(ctx).color]))

    with_global_options(own)
    assert with_global_options(own) is own  # once per command
    mine = [p for p in own.params if isinstance(p, main_module.GlobalOption)]
    assert [p.opts for p in mine] == [["--inventory"], ["--hostfile"], ["--connect-timeout"],
                                      ["--accept-new-host-keys"], ["--persist"]]
    # --color/--no-color: taken
    group = click.Group(commands={"own": own})
    group.params = list(main.params)
    group.callback = main.callback
    result = CliRunner().invoke(group, ["own", "-i", "5", "--inventory", "f.yaml",
                                        "--color", "red"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output) == [5, "red", "f.yaml", None]


def test_the_real_program_takes_options_after_the_subcommand(tmp_path: Path) -> None:
    hostfile = tmp_path / "machines"
    hostfile.write_text("titan slots=1\ngtx970 slots=1\n")  # not the inventory's 4 + 1 GPUs
    proc = subprocess.run([sys.executable, "-m", "tfctl.tui", "plan", "--json", "-i",
                           str(EXAMPLE), "--hostfile", str(hostfile)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    tasks = json.loads(proc.stdout)["tasks"]
    assert [t["host"] for t in tasks if t["type"] == "worker"] == ["titan", "gtx970"]


# ---------------------------------------------------------------- B: cluster.yaml up the tree

def run_in(folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "TFCTL_INVENTORY"}
    return subprocess.run([sys.executable, "-m", "tfctl.tui", *args], capture_output=True,
                          text=True, timeout=60, cwd=folder, env=env)


def test_cluster_yaml_is_found_in_a_parent_folder(tmp_path: Path) -> None:
    inventory(tmp_path, "parent")
    deep = tmp_path / "src" / "models"
    deep.mkdir(parents=True)
    proc = run_in(deep, "plan", "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["name"] == "parent"
    assert {t["cwd"] for t in data["tasks"]} == {"~/tfctl/parent"}
    inventory(deep, "nearest")
    assert json.loads(run_in(deep, "plan", "--json").stdout)["name"] == "nearest"


def test_a_named_inventory_is_never_looked_for_elsewhere(tmp_path: Path) -> None:
    inventory(tmp_path, "parent")
    (tmp_path / "sub").mkdir()
    proc = run_in(tmp_path / "sub", "plan", "-i", "cluster.yaml")
    assert proc.returncode == 2 and "cluster.yaml: no such file" in proc.stderr


def test_no_inventory_anywhere_says_where_it_looked_and_what_to_do(tmp_path: Path) -> None:
    if any((p / "cluster.yaml").is_file() for p in tmp_path.parents):
        pytest.skip("a folder above the test's has a cluster.yaml")
    proc = run_in(tmp_path, "plan")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert f"not found in {tmp_path} or any folder above it" in proc.stderr
    assert "`tfctl init`" in proc.stderr and "-i FILE" in proc.stderr


def test_init_writes_here_even_below_another_inventory(tmp_path: Path) -> None:
    inventory(tmp_path, "parent")
    (tmp_path / "sub").mkdir()
    proc = run_in(tmp_path / "sub", "init", "--hosts", "a:1")
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "sub" / "cluster.yaml").is_file()
    assert "next: `tfctl plan`" in proc.stdout


# ---------------------------------------------------------------- C: leave ssh to ~/.ssh/config

SSH_KEYS = ("user", "port", "identity_file")


def test_init_leaves_user_port_and_key_to_ssh_config(tmp_path: Path) -> None:
    path = tmp_path / "cluster.yaml"
    result = CliRunner().invoke(main, ["init", "-i", str(path), "--hosts", "a:1"])
    assert result.exit_code == 0, result.output
    text = path.read_text()
    for key in SSH_KEYS:
        assert re.search(rf"^  # {key}: ", text, re.M), key
        assert not re.search(rf"^\s*{key}:", text, re.M), key
    assert "wins over ~/.ssh/config" in text
    host = load_inventory(path).hosts[0]
    assert (host.user, host.port, host.identity_file) == (None, None, None)


def readme_inventory() -> str:
    readme = (ROOT / "README.md").read_text()
    block = re.search(r"```yaml\n(name: lab  .*?)```", readme, re.S)
    assert block is not None
    return block.group(1)


@pytest.mark.parametrize("text", [readme_inventory(), EXAMPLE.read_text()],
                         ids=["README", "examples/two-hosts.yaml"])
def test_the_documented_inventory_gives_the_same_advice(text: str) -> None:
    for key in SSH_KEYS:
        assert re.search(rf"^  # {key}: ", text, re.M), key
        assert not re.search(rf"^\s*{key}:", text, re.M), key
    assert "~/.ssh/config" in text and "wins over it" in text
