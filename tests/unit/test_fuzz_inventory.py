"""Bad input, generated: inventories and command lines broken in every way hypothesis can find.

Properties checked on every generated example:
1. The loader raises nothing but `InventoryError`, and every error is located: it has a line,
   and that line is where the key it names sits in the file (or, for a key that is missing, its
   nearest parent) — computed by an independent walk over PyYAML's node marks
   (tests/support/inventory_oracle.py).
2. The CLI (in-process through click's CliRunner, for speed) exits 0 when the file is valid and
   2 otherwise, printing exactly one line, `error: ` + that located message, and no traceback.
3. Command lines with any mistake (unknown command or option, a value of the wrong type, a
   missing value, a bad inventory) exit 2 — 0 only where --help/--version is asked for —
   without ever contacting a host or printing a traceback.
A few subprocess runs check that the real entry point (`python -m tfctl.tui`) behaves the same.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from tests.support.inventory_oracle import assert_cli_agrees, cli, expected_line, key_lines
from tfctl.inventory import InventoryError, load_inventory
from tfctl.inventory.plan import make_plan
from tfctl.inventory.schema import (
    DefaultsSpec,
    FileSpec,
    HostSpec,
    JobSpec,
    PortsSpec,
    RestartSpec,
    SyncSpec,
)

FUZZ = settings(max_examples=250, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
FEW = settings(FUZZ, max_examples=100)

# ---------------------------------------------------------------- strategies: valid inventories

NAME = st.from_regex(r"\A[A-Za-z0-9][A-Za-z0-9_.-]{0,10}\Z")
TEXT = st.text(st.characters(codec="utf-8", exclude_characters="\x00"), max_size=16)
SOME_TEXT = st.text(min_size=1, max_size=16)
ENV_NAME = st.from_regex(r"\A[A-Za-z_][A-Za-z0-9_]{0,10}\Z")
ADDRESS = st.from_regex(r"\A[^-\s][^\s]{0,15}\Z")


@st.composite
def valid_inventories(draw: st.DrawFn) -> dict[str, Any]:
    """A valid inventory: 1-4 hosts, optional evaluator/TensorBoard/chief; ports never clash."""
    names = draw(st.lists(NAME, min_size=1, max_size=4, unique=True))
    hosts = []
    for name in names:
        host: dict[str, Any] = {"name": name}
        host.update(draw(st.fixed_dictionaries({}, optional={
            "address": ADDRESS,
            "gpus": st.one_of(st.integers(0, 4),
                              st.lists(st.integers(0, 7), unique=True, max_size=4)),
            "ps": st.integers(0, 2),
            "port": st.integers(1, 65535),
            "user": NAME,
            "workdir": SOME_TEXT,
            "env": st.dictionaries(ENV_NAME, TEXT, max_size=3),
        })))
        hosts.append(host)
    style = draw(st.sampled_from(["tf_config", "flags"]))
    job: dict[str, Any] = {"script": draw(SOME_TEXT), "args": draw(st.lists(TEXT, max_size=3)),
                           "style": style,
                           "workers": draw(st.sampled_from(["per_gpu", "per_host"])),
                           # ps 2222-2223, chief 2220, workers 3000-3007, TensorBoard 6006
                           "ports": {"ps": 2222, "worker": 3000, "chief": 2220}}
    if style == "tf_config" and draw(st.booleans()):
        job["chief"] = draw(st.one_of(st.just(True), st.sampled_from(names)))
    if draw(st.booleans()):
        job["evaluator"] = {"host": draw(st.sampled_from(names)), "script": draw(SOME_TEXT)}
    if draw(st.booleans()):
        job["tensorboard"] = {"host": draw(st.sampled_from(names)), "port": 6006}
    job["sync"] = draw(st.one_of(st.just(False), st.fixed_dictionaries(
        {"source": SOME_TEXT, "exclude": st.lists(TEXT, max_size=2)})))
    job["restart"] = draw(st.fixed_dictionaries({}, optional={
        "worker": st.sampled_from(["never", "on-failure", "always"]),
        "max": st.integers(0, 1000), "backoff": st.floats(0, 3600)}))
    doc: dict[str, Any] = {"name": draw(NAME), "hosts": hosts, "job": job}
    if draw(st.booleans()):
        doc["defaults"] = draw(st.fixed_dictionaries({}, optional={
            "user": NAME, "port": st.integers(1, 65535), "python": SOME_TEXT,
            "workdir": SOME_TEXT, "env": st.dictionaries(ENV_NAME, TEXT, max_size=2),
            "transport": st.sampled_from(["ssh", "local"])}))
    return doc


# ---------------------------------------------------------------- strategies: what goes wrong

def nested(depth: int, kind: str) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = [value] if kind == "list" else {"k": value}
    return value


BAD_PORTS = st.one_of(st.integers(max_value=0), st.integers(min_value=65536),
                      st.sampled_from([-1, 0, 65536, 2**63, -(2**63), 10**30]))
SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(), TEXT, BAD_PORTS,
    st.sampled_from(["", "-1", "65536", "0x1F", "∞", "yes", "null", "ünïcödé", "名前", "a b",
                     "\n", "a: b", "[", "{", "- x", "*alias", "!!python/name:os.system",
                     "\u202e", "\x00"]),
)
JUNK = st.one_of(
    SCALARS,
    st.recursive(SCALARS, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                  st.dictionaries(TEXT, inner, max_size=3)),
                 max_leaves=6),
    st.builds(nested, st.integers(10, 60), st.sampled_from(["list", "dict"])),
)
MODELS = [FileSpec, DefaultsSpec, HostSpec, JobSpec, PortsSpec, RestartSpec, SyncSpec]
KNOWN_KEYS = {k for m in MODELS for k in m.model_fields}


def value_paths(doc: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """Every path below `doc` (mapping keys and list indices)."""
    if isinstance(doc, dict):
        for key, value in doc.items():
            yield (*path, key)
            yield from value_paths(value, (*path, key))
    elif isinstance(doc, list):
        for i, value in enumerate(doc):
            yield (*path, i)
            yield from value_paths(value, (*path, i))


def mapping_paths(doc: Any) -> list[tuple[Any, ...]]:
    return [()] + [p for p in value_paths(doc) if isinstance(get(doc, p), dict)]


def get(doc: Any, path: tuple[Any, ...]) -> Any:
    for part in path:
        doc = doc[part]
    return doc


def mutate(data: st.DataObject, doc: dict[str, Any]) -> tuple[Any, list[str]]:
    """Apply 1-3 random mistakes to `doc` (in place where it stays a mapping)."""
    done: list[str] = []
    for _ in range(data.draw(st.integers(1, 3), label="mistakes")):
        paths = list(value_paths(doc)) if isinstance(doc, dict) else []
        kind = data.draw(st.sampled_from(
            ["replace", "replace", "delete", "unknown", "dup_host", "bad_port", "root"]
            if paths else ["root"]), label="kind")
        if kind == "replace":
            path = data.draw(st.sampled_from(paths), label="path")
            get(doc, path[:-1])[path[-1]] = data.draw(JUNK, label="junk")
        elif kind == "delete":
            path = data.draw(st.sampled_from(paths), label="path")
            del get(doc, path[:-1])[path[-1]]
        elif kind == "unknown":
            where = data.draw(st.sampled_from(mapping_paths(doc)), label="where")
            key = data.draw(SOME_TEXT.filter(lambda k: k not in KNOWN_KEYS), label="key")
            get(doc, where)[key] = data.draw(JUNK, label="junk")
        elif kind == "dup_host" and isinstance(doc.get("hosts"), list) and doc["hosts"]:
            doc["hosts"].append(doc["hosts"][0])
        elif kind == "bad_port":
            owner = data.draw(st.sampled_from(mapping_paths(doc)), label="where")
            key = data.draw(st.sampled_from(["port", "ps", "worker", "chief"]), label="key")
            get(doc, owner)[key] = data.draw(BAD_PORTS, label="port")
        elif kind == "root":
            doc = data.draw(st.one_of(SCALARS, st.lists(SCALARS, max_size=3)), label="root")
            done.append(kind)
            break
        done.append(kind)
    return doc, done


# ---------------------------------------------------------------- the texts

def line_count(text: str) -> int:
    """Lines as YAML counts them (it also breaks lines at \\r, NEL and U+2028/9)."""
    return len(re.split(r"\r\n|[\n\r\x85\u2028\u2029]", text))


def dump(doc: Any) -> str:
    return yaml.safe_dump(doc, allow_unicode=True, sort_keys=False)


# ---------------------------------------------------------------- loading

@pytest.fixture(scope="module")
def fuzz_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fuzz")


def load_outcome(path: Path) -> InventoryError | None:
    """The error `tfctl plan` must print for `path`: the loader's, or, for a file that loads
    without `job:` or without `job.script` (it serves `tfctl run`), the plan's refusal naming
    `job` or `job.script`."""
    try:
        inv = load_inventory(path)
        if not inv.job_written or not inv.job.script:
            make_plan(inv)
    except InventoryError as exc:
        return exc
    return None  # any other exception fails the test with its traceback


# ---------------------------------------------------------------- properties

@FUZZ
@given(doc=valid_inventories())
def test_generated_valid_inventories_load(doc: dict[str, Any], fuzz_dir: Path) -> None:
    path = fuzz_dir / "valid.yaml"
    path.write_text(dump(doc), encoding="utf-8")
    assert load_outcome(path) is None
    assert_cli_agrees(path, None)


@FUZZ
@given(doc=valid_inventories(), data=st.data())
def test_mutated_inventories_are_refused_with_a_located_message(
        doc: dict[str, Any], data: st.DataObject, fuzz_dir: Path) -> None:
    doc, _ = mutate(data, doc)
    text = dump(doc)
    path = fuzz_dir / "mutated.yaml"
    path.write_text(text, encoding="utf-8")
    error = load_outcome(path)
    if error is not None and error.key_path == "job" and "there is no job" in error.message:
        # the plan's refusal of a file without a job (which `tfctl run` loads)
        assert yaml.safe_load(text).get("job") is None, str(error)
    if error is not None:
        assert error.path == str(path), str(error)
        assert error.line is not None, str(error)
        if error.key_path:
            assert error.line == expected_line(error.key_path, key_lines(text)), str(error)
        else:
            assert 1 <= error.line <= line_count(text), str(error)
    assert_cli_agrees(path, error)


TEXT_EDITS = st.sampled_from(["\t", ":", ": ", "- ", "[", "]", "{", "}", "'", '"', "&a ", "*a",
                              "!!binary ", "\n", "\n  ", "#", "\x00", "\r", "\u2028", "ü", "%",
                              "---\n", "? ", "<<: ", "|", ">"])


@FUZZ
@given(doc=valid_inventories(), data=st.data())
def test_edited_text_never_escapes_as_a_traceback(
        doc: dict[str, Any], data: st.DataObject, fuzz_dir: Path) -> None:
    text = dump(doc)
    for _ in range(data.draw(st.integers(1, 4), label="edits")):
        at = data.draw(st.integers(0, len(text)), label="at")
        if data.draw(st.booleans(), label="insert"):
            text = text[:at] + data.draw(st.one_of(TEXT_EDITS, TEXT), label="ins") + text[at:]
        else:
            text = text[:at] + text[at + data.draw(st.integers(1, 20), label="cut"):]
    path = fuzz_dir / "edited.yaml"
    path.write_bytes(text.encode("utf-8", "surrogatepass"))
    error = load_outcome(path)
    if error is not None:
        if error.path != str(path):  # only a `hostfile:` names another file
            assert error.key_path == "hostfile", str(error)
        else:
            assert error.line is not None and 1 <= error.line <= line_count(text), str(error)
    assert_cli_agrees(path, error)


@FEW
@given(blob=st.binary(max_size=300))
def test_binary_garbage_is_refused(blob: bytes, fuzz_dir: Path) -> None:
    path = fuzz_dir / "garbage.yaml"
    path.write_bytes(blob)
    error = load_outcome(path)
    if error is not None:
        assert error.line is not None and error.line >= 1, str(error)
    assert_cli_agrees(path, error)


def test_control_character_is_located(tmp_path: Path) -> None:
    path = tmp_path / "ctl.yaml"
    path.write_text("name: x\nhosts: [{name: a}]\njob: {script: \"t\x1f\"}\n")
    error = load_outcome(path)
    assert error is not None and error.line == 3, str(error)


# ---------------------------------------------------------------- command lines

HOST_COMMANDS = ["check", "sync", "up", "wait", "status", "down", "logs", "exec", "gpus"]
OPTIONS = {  # option → a strategy for a value that is wrong for it (None: a flag)
    "--connect-timeout": st.sampled_from(["abc", "", "1e", "five", "--", "ü"]),
    "--grace": st.sampled_from(["x", "", "1,5"]),
    "--start-timeout": st.sampled_from(["soon", ""]),
    "--timeout": st.sampled_from(["later", "[]"]),
    "-n": st.sampled_from(["ten", "1.5", ""]),
    "--lines": st.sampled_from(["-", "x"]),
    "--interval": st.sampled_from(["fast"]),
}
JUNK_ARG = st.one_of(
    TEXT.filter(lambda s: s not in ("-h", "--help", "--version")),
    st.sampled_from(["--frobnicate", "-Z", "--no-such", "--json=1", "--inventry", "--", "-",
                     "—help"]),
)


@st.composite
def broken_command_lines(draw: st.DrawFn, bad_inventory: str, good_inventory: str
                         ) -> tuple[list[str], str]:
    """argv with at least one mistake; a host-contacting command never gets a valid file."""
    mistake = draw(st.sampled_from(["command", "option", "value", "missing_value",
                                    "inventory"]))
    command = draw(st.sampled_from(["plan", *HOST_COMMANDS]))
    inventory = good_inventory if command == "plan" and mistake != "inventory" \
        else bad_inventory
    argv = ["-i", inventory]
    extra = draw(st.lists(JUNK_ARG, max_size=3))
    if mistake == "command":
        command = draw(NAME.filter(lambda c: c not in ("plan", "init", "demo", "ui",
                                                       "tensorboard", *HOST_COMMANDS)))
    elif mistake == "option":
        extra.insert(0, draw(st.sampled_from(["--frobnicate", "--jsn", "-Z", "--no-such=1"])))
    elif mistake == "value":
        option = draw(st.sampled_from(sorted(OPTIONS)))
        value = draw(OPTIONS[option])
        if option == "--connect-timeout":
            argv += [option, value]
        else:
            command = {"--grace": "down", "--start-timeout": "up", "--timeout": "wait",
                       "-n": "logs", "--lines": "logs", "--interval": "gpus"}[option]
            extra.insert(0, f"{option}={value}" if value.startswith("-") else option)
            if not value.startswith("-"):
                extra.insert(1, value)
    elif mistake == "missing_value":
        return [*argv, command, *extra, draw(st.sampled_from(["-i", "--hostfile"]))], mistake
    return [*argv, command, *extra], mistake


@FUZZ
@given(data=st.data())
def test_broken_command_lines_exit_2_without_traceback(data: st.DataObject,
                                                       fuzz_dir: Path) -> None:
    bad = fuzz_dir / "bad-for-cli.yaml"
    bad.write_text("name: x\nhosts: [{name: h, gpus: many}]\njob: {script: t.py}\n")
    good = fuzz_dir / "good-for-cli.yaml"
    good.write_text("name: x\nhosts: [{name: h, gpus: 1}]\njob: {script: t.py}\n")
    argv, mistake = data.draw(broken_command_lines(str(bad), str(good)), label="argv")
    result = cli(*argv)
    event(f"{mistake}: exit {result.exit_code}")
    if {"-h", "--help", "--version"} & set(argv):
        assert result.exit_code in (0, 2), (argv, result.output)
    else:
        assert result.exit_code == 2, (mistake, argv, result.output)
    if mistake == "inventory" and result.stderr.startswith("error: "):  # not click's "Error:"
        assert result.stderr.startswith(f"error: {bad}:2: hosts[0].gpus:"), result.output


def test_valid_command_line_still_works(fuzz_dir: Path) -> None:
    good = fuzz_dir / "good.yaml"
    good.write_text("name: x\nhosts: [{name: h, gpus: 2}]\njob: {script: t.py}\n")
    result = cli("-i", str(good), "--connect-timeout", "2", "plan", "--json")
    assert result.exit_code == 0 and '"worker:1"' in result.output


# ---------------------------------------------------------------- files that are not files

def test_missing_file_directory_empty_and_deep(tmp_path: Path) -> None:
    cases = {
        tmp_path / "nope.yaml": "no such file",
        tmp_path: "is a directory",
    }
    empty = tmp_path / "empty.yaml"
    empty.write_text("")
    cases[empty] = ":1: the file is empty, not a mapping"
    deep = tmp_path / "deep.yaml"
    deep.write_text("name: x\nhosts: " + "[" * 5000 + "]" * 5000 + "\njob: {script: t}\n")
    cases[deep] = ":1: is nested too deeply"
    selfref = tmp_path / "selfref.yaml"
    selfref.write_text("name: &a [*a]\n")
    cases[selfref] = ":1: "
    for path, words in cases.items():
        result = cli("-i", str(path), "plan")
        assert result.exit_code == 2, result.output
        assert result.stderr.startswith(f"error: {path}"), result.stderr
        assert words in result.stderr and result.stderr.count("\n") == 1, result.stderr


def tfctl_process(*argv: str, cwd: Path, prefix: tuple[str, ...] = ()
                  ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*prefix, sys.executable, "-m", "tfctl.tui", *argv],
                          capture_output=True, text=True, timeout=60, cwd=cwd)


def test_real_entry_point_same_as_in_process(tmp_path: Path) -> None:
    garbage = tmp_path / "garbage.yaml"
    garbage.write_bytes(b"name: x\nhosts:\n  - \xc3\x28 bad utf-8\n")
    wrong = tmp_path / "wrong.yaml"
    wrong.write_text("name: x\nhosts:\n  - name: a\n    port: -22\njob: {script: t}\n")
    dup = tmp_path / "dup.yaml"
    dup.write_text("name: x\nhosts: [{name: a}, {name: a}]\njob: {script: t}\n")
    expected = {
        garbage: f"error: {garbage}:3: is not UTF-8 text",
        wrong: f"error: {wrong}:4: hosts[0].port: a port is a number from 1 to 65535",
        dup: f"error: {dup}:2: hosts[1].name: host name 'a' is already used by hosts[0]",
        tmp_path / "missing.yaml": f"error: {tmp_path / 'missing.yaml'}: no such file",
        tmp_path: f"error: {tmp_path}: is a directory",
    }
    for path, start in expected.items():
        proc = tfctl_process("-i", str(path), "plan", cwd=tmp_path)
        assert proc.returncode == 2, proc.stderr
        assert proc.stderr.startswith(start) and proc.stderr.count("\n") == 1, proc.stderr
        assert "Traceback" not in proc.stderr
    usage = tfctl_process("--connect-timeout", "soon", "plan", cwd=tmp_path)
    assert usage.returncode == 2 and "Traceback" not in usage.stderr
    assert "'soon' is not a valid float" in usage.stderr


def test_unreadable_file_is_named(tmp_path: Path) -> None:
    path = tmp_path / "secret.yaml"
    path.write_text("name: x\njob: {script: t}\n")
    path.chmod(0)
    prefix: tuple[str, ...] = ()
    if os.geteuid() == 0:  # root reads anything: drop the capabilities that let it
        if shutil.which("setpriv") is None:
            pytest.skip("as root this needs setpriv to drop CAP_DAC_OVERRIDE")
        prefix = ("setpriv", "--bounding-set=-dac_override,-dac_read_search")
    proc = tfctl_process("-i", str(path), "plan", cwd=tmp_path, prefix=prefix)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr == (f"error: {path}: cannot be read (Permission denied) — check the "
                           "file's permissions\n")
