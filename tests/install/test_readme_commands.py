"""The README's command tables say what `--help` says (pure: click's own command objects).

- "## Commands": one row per command (`tfctl export slurm|tfjob` for a group: its subcommands;
  a group that is a command of its own too, `tfctl lab`, has its own row besides);
  every option a row shows exists on that command, and every option the command has is in its
  row, by any of its spellings (`-f` stands for `-f/--follow`).
- Global options (`-i`, `--persist`, ... accepted before or after every subcommand) are listed
  once, in the "Global options:" line under the table, not in each row; that line must name each
  of the group's options. click's own `--help` and `--version` are left out of both.
- A hidden option (kept only so that old scripts still run, absent from `--help`) must not be
  in the table: the README teaches what `--help` shows.
- "## Machine-readable output": its rows name exactly the commands that have `--json`, each with
  `--json`.
"""

from __future__ import annotations

import re
from pathlib import Path

import click
import pytest

from tfctl.tui.cli.main import COMMANDS, GlobalOption, main

README = Path(__file__).resolve().parents[2] / "README.md"
CLICKS_OWN = {"--help", "-h", "--version"}


def section(text: str, title: str) -> str:
    return text.split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]


def cells(row: str) -> list[str]:
    """A Markdown table row's cells, `\\|` inside a cell kept as `|`."""
    return [c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", row.strip())[1:-1]]


def table_rows(text: str) -> list[list[str]]:
    return [cells(line) for line in text.splitlines()
            if line.startswith("| `tfctl")]


def spellings(words: str) -> set[str]:
    """The option spellings in a synopsis (`[--on lab|slurm] [-n N] [--color/--no-color]`)."""
    found = set()
    for word in words.split():
        word = word.strip("[](),.…")
        if word.startswith("-") and word != "--":
            found.update(w for w in re.split(r"[/|]", word) if w.startswith("-"))
    return found


def command_options(command: click.Command) -> list[click.Option]:
    """The command's own options (not the global copies), hidden ones included."""
    return [p for p in command.params if isinstance(p, click.Option)
            and not isinstance(p, GlobalOption) and not set(p.opts) & CLICKS_OWN]


def names(option: click.Option) -> set[str]:
    return {*option.opts, *option.secondary_opts}


def command(name: str) -> click.Command:
    found = main.get_command(click.Context(main), name)
    assert found is not None, f"no command `tfctl {name}`"
    return found


def synopses() -> dict[tuple[str, ...], str]:
    """(command, subcommand...) → the row's synopsis, for every row of "## Commands"."""
    out: dict[tuple[str, ...], str] = {}
    for row in table_rows(section(README.read_text(), "Commands")):
        code = re.match(r"`([^`]*)`", row[0])
        assert code, row[0]
        words = code.group(1).split()
        assert words[0] == "tfctl", row[0]
        if len(words) == 1:
            continue
        name, rest = words[1], " ".join(words[2:])
        cmd = command(name)
        if isinstance(cmd, click.Group) and not (cmd.invoke_without_command and
                                                 rest.split(" ")[0] not in cmd.commands):
            subs, _, rest = rest.partition(" ")
            for sub in subs.split("|"):
                assert sub in cmd.commands, f"`tfctl {name} {sub}`: no such subcommand"
                out[(name, sub)] = rest
        else:
            out[(name,)] = rest
    return out


def leaf_commands() -> dict[tuple[str, ...], click.Command]:
    out: dict[tuple[str, ...], click.Command] = {}
    for name in COMMANDS:
        cmd = command(name)
        if isinstance(cmd, click.Group):
            out.update({(name, sub): c for sub, c in cmd.commands.items()})
            if cmd.invoke_without_command:  # a command of its own too (`tfctl lab`)
                out[(name,)] = cmd
        else:
            out[(name,)] = cmd
    return out


def test_every_command_has_one_row_and_every_row_a_command() -> None:
    assert sorted(synopses()) == sorted(leaf_commands())


@pytest.mark.parametrize("path", sorted(leaf_commands()), ids=" ".join)
def test_the_rows_options_are_the_commands_options(path: tuple[str, ...]) -> None:
    rows = synopses()
    assert path in rows, f"README's command table has no row for `tfctl {' '.join(path)}`"
    shown = spellings(rows[path])
    cmd = leaf_commands()[path]
    known = set().union(*(names(o) for o in command_options(cmd)))
    globals_ = set().union(*(names(o) for o in cmd.params if isinstance(o, GlobalOption)))
    wrong = [f"shows {w}: no such option" for w in sorted(shown - known - globals_)]
    wrong += [f"shows {w}: a global option (in the line under the table)"
              for w in sorted(shown & (globals_ - known))]
    for option in command_options(cmd):
        if option.hidden and names(option) & shown:
            wrong.append(f"shows {option.opts[-1]}, which `--help` hides")
        elif not option.hidden and not names(option) & shown:
            wrong.append(f"lacks {'/'.join(option.opts)}")
    assert not wrong, f"README's row of `tfctl {' '.join(path)}`: " + "; ".join(wrong)


def test_the_global_options_line_names_the_groups_options() -> None:
    text = section(README.read_text(), "Commands")
    line = text.split("Global options:", 1)[1].split("\n\n", 1)[0]
    shown = set().union(*(spellings(code) for code in re.findall(r"`([^`]*)`", line)))
    group = {s for p in main.params if isinstance(p, click.Option)
             for s in names(p)} - CLICKS_OWN
    assert shown == group


def test_machine_readable_output_names_every_command_with_json() -> None:
    rows = table_rows(section(README.read_text(), "Machine-readable output"))
    named: set[str] = set()
    for row in rows:
        for code in re.findall(r"`(tfctl [^`]*)`", row[0]):
            words = code.split()
            assert "--json" in words, f"`{code}` in the JSON table without --json"
            cmd = leaf_commands()[(words[1],)]
            assert spellings(code) <= set().union(*(names(o) for o in command_options(cmd))), \
                code
            named.add(words[1])
    with_json = {path[0] for path, cmd in leaf_commands().items()
                 if any("--json" in o.opts for o in command_options(cmd))}
    assert named == with_json
