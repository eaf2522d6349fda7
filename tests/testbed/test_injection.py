"""Hostile strings and exposure, on real sshd hosts.

Injection: host names are validated (exit 2 before any host is contacted); workdirs, script
args and env values holding `;`, `$(...)`, backticks, quotes, backslashes, `|`, `&`, spaces and
newlines arrive verbatim in each task's argv, environment and cwd (read from /proc on the host),
and the commands hidden in them never run (their canary files never appear).

Exposure: no SSH agent reaches the tasks and no private key lands on a host; TensorFlow's task
ports are open to anyone until firewalled, so `tfctl check` says so, and the rules that
`tfctl check --firewall` prints, once applied, admit the inventory's hosts and refuse others.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.testbedtools import (
    FOREVER_FLAGS,
    HERE,
    cmdline_of,
    environ_of,
    job_dir,
    processes_of_run,
    run_id_from,
    status_json,
    tfctl,
)
from tfctl.inventory import parse_inventory
from tfctl.inventory.plan import make_plan
from tfctl.remote.runs.firewall import MULTIPORT_MAX, firewall_rules, render


@pytest.fixture
def canaries() -> Iterator[list[Path]]:
    tag = uuid.uuid4().hex[:10]
    paths = [Path(f"/tmp/pwned-{tag}-{i}") for i in range(5)]
    yield paths
    for p in paths:
        p.unlink(missing_ok=True)


def hostile(canaries: list[Path], newline: bool = True) -> str:
    """Every shell metacharacter that could run one of the canary commands if mis-quoted."""
    a, b, c, d, e = canaries
    text = (f"x y;touch {a};'q\"\\ $(touch {b}) `touch {c}` |touch {d}& "
            f"$'\\x41' ${{HOME}} *")
    return text + (f"\n touch {e}\n" if newline else f" && touch {e}")


def tasks_on_hosts(run_id: str) -> dict[str, int]:
    return {env["TFCTL_TASK"]: pid for pid, env in processes_of_run(run_id).items()
            if Path(f"/proc/{pid}/comm").read_text().strip() != "tfctl-keeper"}


def started_tasks(run_id: str, plan: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Each task as the run started it: its host's `manifest.json` (the plan, with the ports
    `up` chose where the plan's were taken on the host: "ports taken elsewhere, chosen free")."""
    started = {}
    for cwd in {t["cwd"] for t in plan["tasks"]}:
        manifest = json.loads((Path(cwd) / ".tfctl" / "runs" / run_id / "manifest.json")
                              .read_text())
        started.update({t["name"]: t for t in manifest["tasks"]})
    return started


def assert_verbatim(inv: Path, run_id: str, text: str) -> None:
    """Each task's argv, env and cwd are exactly what the run started it with, which is what
    `tfctl plan --json` says (but for the cluster's ports where `up` had to choose others)."""
    plan = json.loads(tfctl(inv, "plan", "--json").stdout)
    started = started_tasks(run_id, plan)
    moved = any(started[t["name"]]["port"] != t["port"] for t in plan["tasks"])
    pids = tasks_on_hosts(run_id)
    assert set(pids) == {t["name"] for t in plan["tasks"]} == set(started)
    for planned in plan["tasks"]:
        task = started[planned["name"]]
        if not moved:
            assert (task["argv"], task["env"], task["cwd"]) == \
                (planned["argv"], planned["env"], planned["cwd"]), task["name"]
        pid = pids[task["name"]]
        assert cmdline_of(pid)[1:] == task["argv"][1:], task["name"]
        assert text in cmdline_of(pid)
        env = environ_of(pid)
        assert {k: env.get(k) for k in task["env"]} == task["env"], task["name"]
        assert env["EVIL"] == text == task["env"]["EVIL"]
        assert os.readlink(f"/proc/{pid}/cwd") == task["cwd"] == planned["cwd"]


def test_bad_host_names_are_refused_before_any_contact(tmp_path: Path,  # type: ignore[no-untyped-def]
                                                       canaries) -> None:
    for bad in (f"h1;touch {canaries[0]}", f"$(touch {canaries[1]})", "-oProxyCommand=x",
                "h1 h2", "h1\nh2"):
        inv = tmp_path / "cluster.yaml"
        inv.write_text(json.dumps({"name": "lab", "hosts": [{"name": bad}],
                                   "job": {"script": "job.py"}}))  # JSON is YAML
        for command in (["plan"], ["up"]):
            proc = tfctl(inv, *command, timeout=60)
            assert proc.returncode == 2, proc.stderr
            assert proc.stderr.startswith(f"error: {inv}:1: hosts[0].name: String should match")
    assert not any(p.exists() for p in canaries)


def test_hostile_workdir_args_and_env_arrive_verbatim(testbed, tmp_path: Path,  # type: ignore[no-untyped-def]
                                                      canaries, down_after) -> None:
    text = hostile(canaries, newline=True)
    workdir_text = hostile(canaries, newline=False)  # newline in a workdir: see the xfail below
    job = {"script": "job.py", "style": "tf_config", "args": ["--forever", text]}
    fields = {h: {"workdir": str(testbed.host(h).workdir / workdir_text)} for h in ("h1", "h2")}
    inv = testbed.write_inventory(job_dir(tmp_path) / "cluster.yaml", job, hosts=["h1", "h2"],
                              host_fields=fields, ps={"h2": 0}, env={"EVIL": text})
    down_after.append(inv)
    agent = subprocess.run(["ssh-agent", "-s", "-a", str(tmp_path / "agent.sock")],
                           capture_output=True, text=True, check=True)
    agent_pid = agent.stdout.split("SSH_AGENT_PID=")[1].split(";")[0]
    try:
        env = {"SSH_AUTH_SOCK": str(tmp_path / "agent.sock")}  # an agent there to be forwarded
        up = tfctl(inv, "up", env=env)
        assert up.returncode == 0, up.stdout + up.stderr
        run_id = run_id_from(up.stdout)
        assert_verbatim(inv, run_id, text)
        for pid in tasks_on_hosts(run_id).values():
            assert "SSH_AUTH_SOCK" not in environ_of(pid)  # no agent forwarded
        logs = tfctl(inv, "logs", "-n", "5", env=env)
        assert repr(text)[1:-1] in logs.stdout  # the task printed its argv: the text as given
        down = tfctl(inv, "down", "--grace", "1", env=env)
        assert down.returncode == 0 and processes_of_run(run_id) == {}, down.stderr
    finally:
        subprocess.run(["kill", agent_pid], check=False)
    assert not any(p.exists() for p in canaries), "a hidden command ran"
    private = testbed.key.read_text().split("-----")[2].strip().splitlines()[1]
    for h in ("h1", "h2"):  # no private key copied anywhere into the hosts' workdirs
        for path in Path(fields[h]["workdir"]).rglob("*"):
            assert not path.is_file() or private.encode() not in path.read_bytes(), path


def test_workdir_with_a_newline_launches_verbatim(testbed, tmp_path: Path,  # type: ignore[no-untyped-def]
                                                  canaries, down_after) -> None:
    text = hostile(canaries, newline=True)
    fields = {}
    for h in ("h1", "h2"):
        workdir = testbed.host(h).workdir / text
        workdir.mkdir(parents=True, exist_ok=True)  # the hosts' disks are this machine's
        shutil.copy(HERE / "lightjob.py", workdir / "job.py")
        fields[h] = {"workdir": str(workdir)}
    job = {"script": "job.py", "style": "flags", "args": ["--forever", text], "sync": False}
    inv = testbed.write_inventory(job_dir(tmp_path) / "cluster.yaml", job, hosts=["h1", "h2"],
                              host_fields=fields, env={"EVIL": text})
    down_after.append(inv)
    up = tfctl(inv, "up")
    assert up.returncode == 0, up.stdout + up.stderr
    run_id = run_id_from(up.stdout)
    assert_verbatim(inv, run_id, text)
    assert tfctl(inv, "down", "--grace", "1").returncode == 0
    assert processes_of_run(run_id) == {}
    assert not any(p.exists() for p in canaries), "a hidden command ran"


def test_sync_to_a_workdir_with_a_newline(testbed, tmp_path: Path, canaries) -> None:  # type: ignore[no-untyped-def]
    workdir = testbed.host("h1").workdir / hostile(canaries, newline=True)
    inv = testbed.write_inventory(job_dir(tmp_path) / "cluster.yaml", {"script": "job.py"},
                              hosts=["h1"], host_fields={"h1": {"workdir": str(workdir)}})
    proc = tfctl(inv, "sync")
    assert not any(p.exists() for p in canaries)
    assert proc.returncode == 0, proc.stderr
    assert (workdir / "job.py").exists()


def test_address_that_looks_like_an_option_is_refused(testbed, tmp_path: Path,  # type: ignore[no-untyped-def]
                                                      canaries) -> None:
    inv = testbed.write_inventory(
        job_dir(tmp_path) / "cluster.yaml", {"script": "job.py"}, hosts=["h1"],
        host_fields={"h1": {"address": f"-oProxyCommand=touch {canaries[0]}"}})
    for command in (["check"], ["up"], ["exec", "--", "true"]):
        proc = tfctl(inv, "--connect-timeout", "2", *command, timeout=60)
        assert proc.returncode == 2, proc.stdout + proc.stderr  # refused by the inventory
        assert "hosts[0].address" in proc.stderr and "Traceback" not in proc.stderr
    assert not canaries[0].exists()


# ---------------------------------------------------------------- exposure: the task ports

def connects(testbed: Any, source: str | None, address: str, port: int) -> bool:
    """Can `source` (a lab host, or None for this machine, which is not in the inventory)
    open a TCP connection to address:port?"""
    code = (f"import socket; socket.create_connection(({address!r}, {port}), timeout=3)"
            ".close()")
    if source is None:
        return subprocess.run([testbed.python, "-c", code], capture_output=True).returncode == 0
    return testbed.run(source, [testbed.python, "-c", code], check=False).returncode == 0


def host_rules(rules: str, host: str) -> dict[str, str]:
    """From `check --firewall` output: one host's nftables ruleset, iptables lines, removal."""
    lines = rules.split(f"# ── {host} ")[1].split("# ── ")[0].splitlines()
    first = next(n for n, line in enumerate(lines) if line.startswith("table inet"))
    last = next(n for n, line in enumerate(lines) if n > first and line == "}")
    return {"nft": "\n".join(lines[first:last + 1]) + "\n",
            "iptables": "set -e\n" + "\n".join(
                line for line in lines if line.startswith(("iptables ", "ip6tables "))),
            "iptables_removal": next(line for line in lines
                                     if line.startswith("# remove: iptables"))[len("# remove: "):]}


def test_firewall_rules_admit_only_the_inventory_hosts(testbed, tmp_path: Path,  # type: ignore[no-untyped-def]
                                                       down_after, healed) -> None:
    if not testbed.isolated:
        pytest.skip("needs the network-namespace lab (each host its own firewall)")
    # h3 stays out of the inventory: it is "anyone else on the network"
    job = FOREVER_FLAGS
    inv = testbed.write_inventory(job_dir(tmp_path) / "cluster.yaml", job, hosts=["h1", "h2"])
    check = tfctl(inv, "check")
    assert check.returncode == 0, check.stdout + check.stderr
    assert "TensorFlow's gRPC task ports accept anyone on the network" in check.stdout
    printed = tfctl(inv, "check", "--firewall")
    assert printed.returncode == 0 and "Traceback" not in printed.stderr
    h2_rules, h1_rules = host_rules(printed.stdout, "h2"), host_rules(printed.stdout, "h1")
    down_after.append(inv)
    up = tfctl(inv, "up")
    assert up.returncode == 0, up.stdout + up.stderr
    h1, h2 = testbed.address("h1"), testbed.address("h2")
    # each host's worker port as the run has it: the plan's 2223, or the port `up` chose
    # where that one was taken on the host (the rules cover the job's whole range)
    worker = {t["host"]: t["port"] for t in status_json(inv)["tasks"] if t["type"] == "worker"}
    ports = {h1: worker["h1"], h2: worker["h2"]}
    for target in (h1, h2):  # open to everyone before the rules
        assert connects(testbed, "h3", target, 2222)
        assert connects(testbed, None, target, ports[target])
    try:
        testbed.run("h2", ["nft", "-f", "-"], input=h2_rules["nft"])
        testbed.run("h1", h1_rules["iptables"])
        for target, other in ((h2, "h1"), (h1, "h2")):
            assert connects(testbed, other, target, 2222)
            assert connects(testbed, other, target, ports[target])
            assert not connects(testbed, "h3", target, 2222), f"h3 reached {target}"
            assert not connects(testbed, None, target, ports[target]), \
                f"this machine reached {target}"
        assert connects(testbed, "h3", h2, 22), "only the task ports are closed"
        st = tfctl(inv, "status", "--json")
        assert {t["state"] for t in json.loads(st.stdout)["tasks"]} == {"running"}
    finally:
        testbed.run("h2", "nft delete table inet tfctl_lab", check=False)
        testbed.run("h1", h1_rules["iptables_removal"], check=False)
    assert connects(testbed, "h3", h2, 2222)  # removed again


FIREWALL_INVENTORY = """\
name: mixed-lab
hosts:
  - {name: big, address: 10.0.0.1, gpus: 20, ps: 3}
  - {name: six, address: "fd00::6", gpus: [1]}
  - {name: named, address: gpu-box.lab, gpus: 0, ps: 0}
job:
  script: train.py
  chief: big
  ports: {ps: 2222, worker: 2230, chief: 2220}
  tensorboard: {host: named, port: 6006}
"""


def test_firewall_rules_cover_the_range_where_ports_are_chosen_at_up() -> None:
    text = FIREWALL_INVENTORY.replace("ports: {ps: 2222, worker: 2230, chief: 2220}",
                                      "ports: {ps: 2222, worker: 2230}\n  port_range: 2240-2259")
    rules = {r.host: r for r in firewall_rules(make_plan(parse_inventory(text, "c.yaml")))}
    # the chief's port is not written: up may give it any port of the range on big
    assert rules["big"].ports == (2220, 2222, 2223, 2224, *range(2230, 2260))
    assert rules["six"].ports == (2222, 2230)  # every port there is written


def test_firewall_rules_from_the_plan() -> None:
    plan = make_plan(parse_inventory(FIREWALL_INVENTORY, "c.yaml"))
    rules = {r.host: r for r in firewall_rules(plan)}
    assert rules["big"].ports == (2220, 2222, 2223, 2224, *range(2230, 2250))
    assert rules["named"].ports == (2230,)  # its worker; TensorBoard is loopback-only
    assert rules["big"].peers == ("10.0.0.1", "fd00::6", "gpu-box.lab")
    nft = rules["six"].nftables
    assert "tcp dport { 2222, 2230 } ip saddr { 10.0.0.1, gpu-box.lab } accept" in nft
    assert "tcp dport { 2222, 2230 } ip6 saddr { fd00::6 } accept" in nft
    assert nft.rstrip().endswith("reject with tcp reset\n\t}\n}")
    assert "tcp dport { 2220, 2222-2224, 2230-2249 }" in rules["big"].nftables
    ipt = rules["big"].iptables.splitlines()
    assert "iptables -A TFCTL-MIXED_LAB -s gpu-box.lab -j ACCEPT" in ipt
    assert "ip6tables -A TFCTL-MIXED_LAB -s fd00::6 -j ACCEPT" in ipt
    assert "iptables -A TFCTL-MIXED_LAB -s fd00::6 -j ACCEPT" not in ipt
    jumps = [line.split("--dports ")[1].split()[0] for line in ipt
             if line.startswith("iptables -I INPUT")]
    covered = set()
    for group in jumps:
        entries = group.split(",")
        assert sum(2 if ":" in e else 1 for e in entries) <= MULTIPORT_MAX
        for e in entries:
            a, _, b = e.partition(":")
            covered |= set(range(int(a), int(b or a) + 1))
    assert covered == set(rules["big"].ports)
    text = render(plan)
    assert text.count("table inet tfctl_mixed_lab {") == 3 and "6006" not in text
