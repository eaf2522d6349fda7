"""Every program the tests, the lab and tfctl run is installed by `scripts/test`.

A green CI once hid a missing install step (iptables and nft were on the CI machine from an
earlier hand install, not on a fresh one). This test reads the code for the programs it runs
(tests/support/programs_scan.py) and fails when one is neither on `scripts/system-packages.txt` nor
part of Debian's base system, so the next missing step fails on every machine, not only a fresh one.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.programs_scan import scan_source, scan_tree, shell_programs

ROOT = Path(__file__).resolve().parents[2]
SCANNED = ("tests", "scripts", "benchmarks", "remote", "tui", "examples")

# Debian's essential and required packages (coreutils, util-linux, bash, dash, apt, libc-bin,
# hostname): on every Debian system, never installed by us.
BASE_SYSTEM = frozenset({
    "sh", "bash", "dash", "sleep", "true", "false", "rm", "env", "timeout", "cat", "setsid",
    "unshare", "nsenter", "setpriv", "mount", "umount", "hostname", "getent", "apt-get", "id",
})
# Not installed by scripts/test: the interpreter the README requires, the venv's programs, the
# test-only stand-ins a test puts on the hosts' PATH itself, and sudo where a user has it.
PROVIDED = {
    "python3": "the README's prerequisite",
    "nvidia-smi": "tests/support/fakes/nvidia_smi_standin.py, put on the lab hosts' PATH",
    "lab-probe": "written onto the host's PATH by tests/testbed/test_testbed.py itself",
    "sudo": "scripts/test's way to apt-get for a user who is not root, used only where present",
}


def _packages_module():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("system_packages",
                                                  ROOT / "scripts" / "system_packages.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_every_program_run_is_installed_by_the_test_command() -> None:
    listed = {prog for pkg in _packages_module().read_list() for prog in pkg.programs}
    uses = scan_tree([ROOT / d for d in SCANNED], ROOT)
    unlisted = sorted({f"{u.program} ({u.where})" for u in uses
                       if u.program not in listed | BASE_SYSTEM | PROVIDED.keys()})
    assert not unlisted, ("programs run but not installed by scripts/test: add their Debian "
                          f"package to scripts/system-packages.txt: {unlisted}")
    # The scan sees the programs that once went missing: it would catch them again.
    found = {u.program for u in uses}
    assert {"iptables", "nft", "sshd", "rsync", "tmux", "ip"} <= found


def test_the_list_names_packages_and_programs_once() -> None:
    packages = _packages_module().read_list()
    names = [p.name for p in packages]
    programs = [prog for p in packages for prog in p.programs]
    assert len(set(names)) == len(names) and len(set(programs)) == len(programs)
    assert all(p.programs and p.needed_by for p in packages)


def test_scripts_test_installs_from_the_list() -> None:
    script = (ROOT / "scripts" / "test").read_text()
    assert "scripts/system_packages.py missing" in script and "apt-get install" in script


def test_missing_report_is_one_line_naming_programs_and_packages(tmp_path: Path) -> None:
    module = _packages_module()
    listing = tmp_path / "list.txt"
    listing.write_text("# c\nsh-pkg  sh   # always there\n"
                       "ghost-pkg  no-such-program-tfctl  # the ghost tests\n")
    gaps = module.missing(module.read_list(listing))
    assert [(p.name, absent) for p, absent in gaps] == [("ghost-pkg", ["no-such-program-tfctl"])]
    as_root = module.report(gaps, can_install=True)
    assert as_root == "system programs missing: no-such-program-tfctl; installing ghost-pkg"
    user = module.report(gaps, can_install=False)
    assert "\n" not in user and "the ghost tests (no-such-program-tfctl)" in user
    assert module.report([], can_install=True) == "system programs: all present"


def test_the_cli_prints_missing_packages_on_stdout() -> None:
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "system_packages.py"),
                           "missing"], capture_output=True, text=True, check=True)
    assert done.stderr.startswith("system programs") and done.stderr.count("\n") == 1


SCAN_CASES = [
    ('subprocess.run(["iptables", "-S"])', ["iptables"]),
    ('subprocess.Popen(args=("tmux", "new"))', ["tmux"]),
    ('subprocess.run(["ip", "netns", "exec", ns, "nft", "-f", "-"])', ["ip", "nft"]),
    ('SSHD = "/usr/sbin/sshd"\nsubprocess.Popen([*prefix, SSHD, "-D"])', ["sshd"]),
    ('def rule(a):\n    return ["iptables", a]\n_netns_run(ns, rule("-I"))', ["iptables"]),
    ('argv = ["rsync", "-a"]\nsubprocess.run(argv)', ["rsync"]),
    ('testbed.run("h1", "nft list ruleset; ss -ltn 2>&1 | grep x")', ["nft", "ss", "grep"]),
    ('testbed.run("h1", ["sh", "-c", "pdsh -w h hostname; $(id -u)"])', ["sh", "pdsh", "id"]),
    ('tfctl(inv, "exec", "--", "ssh-agent", "-s")', ["ssh-agent"]),
    ('shutil.which("unshare")', ["unshare"]),
    ('bench.start("sleep", "120")', ["sleep"]),
    ('subprocess.run([sys.executable, "-c", "x"])', []),
    ('call("status", workdir=w)', []),
    ('processes.start("train", [TRAIN, "--x"])\nTRAIN = "examples/train.py"', []),
]


@pytest.mark.parametrize(("source", "programs"), SCAN_CASES)
def test_scan_finds_the_programs_each_form_runs(source: str, programs: list[str]) -> None:
    assert sorted(u.program for u in scan_source(source)) == sorted(programs)


def test_shell_programs_skip_assignments_builtins_and_redirections() -> None:
    line = "X=1 exec foo a >/dev/null 2>&1; echo $(bar) && cd / || baz"
    assert shell_programs(line) == ["foo", "bar", "baz"]
