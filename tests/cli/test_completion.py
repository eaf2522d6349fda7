"""Shell completion of host and task names through click's own protocol (`_TFCTL_COMPLETE`), run
as the shell runs it: the program with COMP_WORDS/COMP_CWORD set, in a folder of the project.

click's protocol: https://click.palletsprojects.com/en/stable/shell-completion/ (bash answers
`type,value` lines; zsh `type`, `value`, `help` lines; fish `value<TAB>help`).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import click
import pytest
from click.shell_completion import ShellComplete

from tfctl.tui.cli.context import complete_hosts, complete_hosts_or_tasks, complete_tasks
from tfctl.tui.cli.main import COMMANDS, main

EXAMPLE = Path(__file__).parents[2] / "examples" / "two-hosts.yaml"
TASKS = ["ps:0", "worker:0", "worker:1", "worker:2", "worker:3", "worker:4", "chief:0",
         "evaluator:0", "tensorboard:0"]
WORKERS = [t for t in TASKS if t.startswith("worker:")]


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A project with the example inventory as its cluster.yaml; tests run in a subfolder."""
    (tmp_path / "cluster.yaml").write_text(EXAMPLE.read_text())
    (tmp_path / "src").mkdir()
    return tmp_path / "src"


def complete(cwd: Path, line: str, shell: str = "bash", **env: str) -> list[str]:
    """What the shell gets for `line` (the word after its last space being completed)."""
    words = line.split(" ")
    clean = {k: v for k, v in os.environ.items() if k != "TFCTL_INVENTORY"}
    proc = subprocess.run([sys.executable, "-m", "tfctl.tui"], capture_output=True, text=True,
                          timeout=60, cwd=cwd,
                          env={**clean, **env, "_TFCTL_COMPLETE": f"{shell}_complete",
                               "COMP_WORDS": line,  # fish: COMP_CWORD is the word itself
                               "COMP_CWORD": words[-1] if shell == "fish" else str(len(words) - 1)})
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    lines = proc.stdout.splitlines()
    if shell == "bash":
        return [v.split(",", 1)[1] for v in lines if v]
    if shell == "zsh":
        return lines[1::3]
    return [v.split("\t")[0].split(",", 1)[1] for v in lines if v]


def test_logs_completes_the_planned_task_names(project: Path) -> None:
    assert complete(project, "tfctl logs w") == WORKERS
    assert complete(project, "tfctl logs ") == TASKS
    assert complete(project, "tfctl logs -n 5 worker:0 c") == ["chief:0"]


def test_the_inventory_named_before_or_after_the_command_is_used(tmp_path: Path) -> None:
    other = tmp_path / "other.yaml"
    other.write_text("name: o\nhosts: [{name: solo, gpus: 2}]\njob: {script: t.py}\n")
    assert complete(tmp_path, f"tfctl logs -i {other} w") == ["worker:0", "worker:1"]
    assert complete(tmp_path, f"tfctl -i {other} logs w") == ["worker:0", "worker:1"]
    assert complete(tmp_path, f"tfctl --inventory={other} up --only ") == ["solo"]
    assert complete(tmp_path, "tfctl up --exclude s", TFCTL_INVENTORY=str(other)) == ["solo"]
    assert complete(tmp_path, "tfctl logs w", TFCTL_INVENTORY=str(other)) == \
        ["worker:0", "worker:1"]


def test_host_options_complete_host_names(project: Path) -> None:
    assert complete(project, "tfctl up --only ") == ["titan", "gtx970"]
    assert complete(project, "tfctl up --only g") == ["gtx970"]
    assert complete(project, "tfctl exec --hosts titan,") == ["titan,gtx970"]


def test_bash_splits_task_names_at_the_colon_and_still_completes(project: Path) -> None:
    # bash's COMP_WORDBREAKS has `:`: `worker:` arrives as `worker`, `:`; bash keeps `worker:`
    assert complete(project, "tfctl logs worker :") == ["0", "1", "2", "3", "4"]
    assert complete(project, "tfctl logs worker : 3") == ["3"]
    assert complete(project, "tfctl logs worker:") == WORKERS  # COMP_WORDBREAKS without `:`


def test_zsh_and_fish_get_whole_names(project: Path) -> None:
    assert complete(project, "tfctl logs worker:", shell="zsh") == \
        [w.replace(":", "\\:") for w in WORKERS]  # zsh's _describe needs the colon escaped
    assert complete(project, "tfctl logs worker:", shell="fish") == WORKERS


@pytest.mark.parametrize("text", ["hosts: [", "name: x\nhosts: []\njob: {script: t.py}\n",
                                  "name: x\nhosts: [{name: a, gpus: nope}]\njob: {}\n", "\0"])
def test_a_broken_inventory_completes_nothing_and_says_nothing(tmp_path: Path,
                                                             text: str) -> None:
    (tmp_path / "cluster.yaml").write_text(text)
    assert complete(tmp_path, "tfctl logs ") == []
    assert complete(tmp_path, "tfctl up --only ") == []


def test_no_inventory_completes_nothing(tmp_path: Path) -> None:
    assert complete(tmp_path, "tfctl logs -i missing.yaml ") == []


def test_completion_stays_cheap(project: Path) -> None:
    probe = ("import sys\nfrom tfctl.tui.cli.main import main\n"
             "try:\n    main(prog_name='tfctl')\nexcept SystemExit:\n    pass\n"
             "heavy = [m for m in ('paramiko', 'fabric', 'invoke', 'textual')\n"
             "         if m in sys.modules]\n"
             "print('HEAVY', heavy)\n")
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          timeout=60, cwd=project,
                          env={**os.environ, "_TFCTL_COMPLETE": "bash_complete",
                               "COMP_WORDS": "tfctl ssh w", "COMP_CWORD": "2"})
    assert "plain,worker:0" in proc.stdout and "HEAVY []" in proc.stdout, proc.stderr


# ---------------------------------------------------------------- the functions, in process

@click.command()
@click.argument("target", shell_complete=complete_hosts_or_tasks)
@click.option("--host", shell_complete=complete_hosts)
@click.option("--task", shell_complete=complete_tasks)
def probe(target: str, host: str | None, task: str | None) -> None:
    """A command as another engineer would write one."""


def values(args: list[str], incomplete: str) -> list[str]:
    completer = ShellComplete(main, {}, "tfctl", "_TFCTL_COMPLETE")
    return [str(item.value) for item in completer.get_completions(args, incomplete)]


def test_the_completion_functions_for_new_arguments(project: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(COMMANDS, "probe", (__name__, "probe"))
    monkeypatch.chdir(project)
    monkeypatch.delenv("TFCTL_INVENTORY", raising=False)
    monkeypatch.delenv("_TFCTL_COMPLETE", raising=False)
    assert values(["probe"], "") == ["titan", "gtx970", *TASKS]
    assert values(["probe"], "t") == ["titan", "tensorboard:0"]
    assert values(["probe", "x", "--host"], "") == ["titan", "gtx970"]
    assert values(["probe", "x", "--task"], "p") == ["ps:0"]
    monkeypatch.chdir(project.parent.parent)  # above the project: no inventory, no names
    assert values(["probe"], "") == []


def test_ssh_completes_hosts_then_tasks(project: Path) -> None:
    assert complete(project, "tfctl ssh ") == ["titan", "gtx970", *TASKS]
    assert complete(project, "tfctl ssh g") == ["gtx970"]
    assert complete(project, "tfctl ssh w") == WORKERS
