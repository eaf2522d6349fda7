"""The cluster spec names each host as the other hosts reach it: `cluster_address`, else the
HostName of its ssh config (`ssh -G`, remote/connect/clusteraddr.py), never a client-side alias;
and `check` tells a name the hosts cannot resolve from a port a firewall blocks.

On the lab, with real sshd hosts: tests/testbed/test_cluster_names.py (plan and check), and
real TensorFlow training over ssh aliases: tests/testbed/test_tf.py.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from tfctl.inventory import InventoryError, make_plan, parse_inventory
from tfctl.inventory.model import Host
from tfctl.remote.agent.vocab import ConnectResult
from tfctl.remote.connect.clusteraddr import cluster_address
from tfctl.remote.runs.check import judge_peers

needs_ssh = pytest.mark.skipif(shutil.which("ssh") is None, reason="needs the ssh client")

LAB = """\
name: lab
hosts:
  - {name: labh1, address: labh1, gpus: 0}
  - {name: labh2, address: labh2, gpus: 0%s}
job: {script: train.py, strategy: parameter_server, chief: true}
"""


def inventory(extra: str = "") -> Any:
    return parse_inventory(LAB % extra, "cluster.yaml")


def ssh_names(host: Host) -> str:
    """What an ssh config with `Host labh*` / `HostName 10.231.0.1N` resolves."""
    return {"labh1": "10.231.0.11", "labh2": "10.231.0.12"}[host.address]


# ---------------------------------------------------------------- the plan (pure)


def test_the_cluster_spec_names_what_reach_resolves_and_tasks_carry_it() -> None:
    plan = make_plan(inventory(), reach=ssh_names)
    assert plan.cluster == {"chief": ["10.231.0.11:2220"],
                            "worker": ["10.231.0.11:2223", "10.231.0.12:2223"],
                            "ps": ["10.231.0.11:2222", "10.231.0.12:2222"]}
    tf_config = json.loads(plan.task("worker:1").env["TF_CONFIG"])
    assert tf_config["cluster"]["ps"] == ["10.231.0.11:2222", "10.231.0.12:2222"]
    assert plan.task("ps:1").address == "10.231.0.12" and plan.address_of("labh2") == \
        "10.231.0.12"
    assert plan.to_json()["addresses"] == {"labh1": "10.231.0.11", "labh2": "10.231.0.12"}
    # The ssh side keeps the alias: that is how this client connects.
    assert [h.address for h in plan.inventory.hosts] == ["labh1", "labh2"]


def test_without_reach_the_spec_names_the_address_as_written() -> None:
    plan = make_plan(inventory())
    assert plan.cluster["ps"] == ["labh1:2222", "labh2:2222"]


def test_a_written_cluster_address_wins_over_the_ssh_config() -> None:
    plan = make_plan(inventory(", cluster_address: 10.9.0.12"), reach=ssh_names)
    assert plan.cluster["ps"] == ["10.231.0.11:2222", "10.9.0.12:2222"]
    assert plan.task("worker:1").address == "10.9.0.12"
    flags = make_plan(parse_inventory((LAB % ", cluster_address: 10.9.0.12").replace(
        "strategy: parameter_server, chief: true", "style: flags"), "c.yaml"), reach=ssh_names)
    assert "--ps_hosts=10.231.0.11:2222,10.9.0.12:2222" in flags.task("worker:0").argv


def test_an_ipv6_cluster_address_is_bracketed_in_the_spec() -> None:
    plan = make_plan(inventory(", cluster_address: 'fd00::12'"), reach=ssh_names)
    assert plan.cluster["ps"] == ["10.231.0.11:2222", "[fd00::12]:2222"]


@pytest.mark.parametrize("value", ["10.0.0.12:2222", "-oProxyCommand=x", "two words", "a/b",
                                   "''"])
def test_a_cluster_address_that_is_no_name_or_ip_is_refused_where_it_is_written(
        value: str) -> None:
    with pytest.raises(InventoryError) as info:
        inventory(f", cluster_address: {value}")
    err = info.value
    assert (err.key_path, err.line) == ("hosts[1].cluster_address", 4), str(err)
    assert "without a port" in str(err) or "host name or an IP" in str(err), str(err)


# ---------------------------------------------------------------- ssh -G (real OpenSSH)


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A HOME whose ~/.ssh/config names the lab in an Included file, as labs write it."""
    (tmp_path / ".ssh" / "config.d").mkdir(parents=True)
    (tmp_path / ".ssh" / "config").write_text(f"Include {tmp_path}/.ssh/config.d/*.conf\n")
    (tmp_path / ".ssh" / "config.d" / "lab.conf").write_text(
        "Host labh1\n  HostName 10.231.0.11\nHost labh2\n  HostName 10.231.0.12\n"
        "  ProxyJump labh1\nHost BigBox\n  User alice\n")
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("TFCTL_SSH_G", raising=False)
    return tmp_path


def host(address: str, **kw: Any) -> Host:
    return Host(name="h", address=address, user=None, port=None, identity_file=None,
                known_hosts="~/.ssh/known_hosts", jump=None, workdir="~", python="python3",
                env={}, gpus=(), ps=0, **kw)


@needs_ssh
def test_an_alias_becomes_its_hostname_and_anything_else_stays_as_written(home: Path) -> None:
    assert cluster_address(host("labh2")) == "10.231.0.12"  # behind a jump host too
    assert cluster_address(host("10.1.2.3")) == "10.1.2.3"
    assert cluster_address(host("BigBox")) == "BigBox"  # no HostName: ssh says `bigbox`
    assert cluster_address(host("labh2", cluster_address="10.9.0.12")) == "10.9.0.12"
    assert cluster_address(host("labh2", transport="local")) == "labh2"


@needs_ssh
def test_an_address_ssh_cannot_read_is_left_as_written(home: Path) -> None:
    """`plan` still plans; connecting is what names the config's mistake."""
    assert cluster_address(host(";")) == ";"  # `ssh -G` refuses the name itself
    (home / ".ssh" / "config").write_text("Host x\n  NoSuchDirective yes\n")
    assert cluster_address(host("x")) == "x"


def test_without_an_ssh_client_paramiko_reads_the_hostname(home: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    (home / ".ssh" / "config").write_text("Host labh2\n  HostName 10.231.0.12\n")
    monkeypatch.setenv("PATH", str(home))  # no `ssh` on it
    assert cluster_address(host("labh2")) == "10.231.0.12"


PROBE = """
import sys
from tfctl.tui.cli.main import main
try:
    main({args!r}, prog_name="tfctl")
except SystemExit:
    pass
print(sorted({{m.split(".")[0] for m in sys.modules}} & {{"fabric", "paramiko", "invoke"}}),
      file=sys.stderr)
"""


@needs_ssh
def test_tfctl_plan_prints_the_hostnames_and_imports_no_ssh_library(home: Path) -> None:
    inv = home / "cluster.yaml"
    inv.write_text(LAB % "")
    proc = subprocess.run([sys.executable, "-c", PROBE.format(args=["-i", str(inv), "plan"])],
                          capture_output=True, text=True, check=True)
    assert "ps_hosts=10.231.0.11:2222,10.231.0.12:2222" in proc.stdout, proc.stdout
    assert "labh2:" not in proc.stdout
    assert proc.stderr.strip().splitlines()[-1] == "[]"


# ---------------------------------------------------------------- check's words (pure)

OWNER = {"10.231.0.12:2222": "labh2", "nosuchhost.invalid:2223": "labh3",
         "10.231.0.14:2222": "labh4", "10.231.0.15:2222": "labh5"}
UNRESOLVED = ConnectResult.from_wire({"target": "nosuchhost.invalid:2223", "ok": False,
                                      "why": "unresolved",
                                      "error": "[Errno -2] Name or service not known"})
TIMEOUT = ConnectResult("10.231.0.14:2222", False, "timed out", "timeout")
REFUSED = ConnectResult("10.231.0.15:2222", False, "[Errno 111] Connection refused", "refused")
FINE = ConnectResult("10.231.0.12:2222", True)
OLD_AGENT = ConnectResult.from_wire({"target": "10.231.0.14:2222", "ok": False,
                                     "error": "timed out"})  # no `why`
HOSTS = textwrap.dedent("""\
    name: lab
    hosts:
      - {name: labh2}
      - {name: labh3, cluster_address: nosuchhost.invalid}
      - {name: labh4}
      - {name: labh5}
    job: {script: t.py, style: flags}
    """)


@pytest.mark.parametrize(("results", "words", "not_words"), [
    ([FINE], [], ["cannot"]),
    ([FINE, UNRESOLVED], ["cannot resolve 'nosuchhost.invalid', the name the cluster spec gives "
                          "labh3", "no firewall is to blame", "correct its `cluster_address:`"],
     ["a firewall between hosts?"]),
    ([TIMEOUT], ["cannot reach 10.231.0.14:2222 (a firewall between hosts?)"], ["resolve"]),
    ([REFUSED], ["cannot reach 10.231.0.15:2222: refused while a listener was there"],
     ["resolve"]),
    ([OLD_AGENT], ["cannot reach 10.231.0.14:2222 (a firewall between hosts?)"], ["resolve"]),
    ([UNRESOLVED, TIMEOUT], ["cannot resolve 'nosuchhost.invalid'",
                             "cannot reach 10.231.0.14:2222 (a firewall"], []),
])
def test_check_tells_an_unresolvable_name_from_a_firewall(
        results: list[ConnectResult], words: list[str], not_words: list[str]) -> None:
    found = judge_peers(results, OWNER, parse_inventory(HOSTS, "c.yaml"))
    text = "\n".join(t for _, t in found)
    assert all(level == "fail" for level, _ in found)
    for w in words:
        assert w in text, text
    for w in not_words:
        assert w not in text, text


def test_an_unresolvable_ssh_hostname_is_told_to_write_a_cluster_address() -> None:
    inv = parse_inventory(HOSTS.replace(", cluster_address: nosuchhost.invalid", ""), "c.yaml")
    ((_, text),) = judge_peers([UNRESOLVED], OWNER, inv)
    assert "give it `cluster_address: <the IP or name the hosts know it by>`" in text
