"""`tfctl check`: the preflight, every host in parallel, one finding per problem.

Per host: reachable over SSH with a verified key; the inventory's python runs; what the job's
framework says there (TensorFlow: its version, the GPUs it sees; `Framework.judge_install`,
`judge_import`); nvidia-smi and the GPU indices the inventory selects; no other user's or run's
process on the GPUs the plan assigns; every task port free; and every other host able to reach
this host's task ports (temporary listeners, then connects from every peer, to the names the
cluster spec gives), which is what a firewall between lab machines breaks, and what a name the
hosts cannot resolve (an ssh alias, say) breaks before any firewall is involved. For a job of
ranks across hosts (torch, jax), each host whose own name resolves to loopback, which gloo
would advertise, and what tfctl does about it (inventory/frameworks/gloo.py).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tfctl.inventory.frameworks import framework_of
from tfctl.inventory.frameworks.gloo import LOOPBACK_SENSITIVE, judge_hostname
from tfctl.inventory.frameworks.interface import Level, host_port
from tfctl.inventory.model import Inventory
from tfctl.inventory.plan import Plan
from tfctl.remote.connect.fleet import Fleet
from tfctl.remote.connect.session import agentops
from tfctl.remote.connect.session.agentops import ConnectResult
from tfctl.remote.connect.transport import Transport
from tfctl.remote.errors import HostUnreachable

LISTEN_SECONDS = 15


@dataclass(frozen=True)
class CheckFinding:
    """One line of `tfctl check`'s report on a host: how bad, and what it says."""

    level: Level
    text: str


@dataclass
class HostReport:
    host: str
    findings: list[CheckFinding] = field(default_factory=list)
    probe: Mapping[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return all(f.level != "fail" for f in self.findings)

    def add(self, level: Level, text: str) -> None:
        self.findings.append(CheckFinding(level, text))


def run_check(fleet: Fleet, plan: Plan) -> list[HostReport]:
    inv = plan.inventory
    framework = framework_of(inv.job)
    reports = {h.name: HostReport(h.name) for h in inv.hosts}
    spread = len(plan.hosts_used)  # a group of ranks across hosts: gloo must not see loopback
    ask_hostname = inv.job.framework in LOOPBACK_SENSITIVE and spread > 1
    probes = fleet.map(lambda t: _probe(t, framework.asks_host, ask_hostname))
    for name, exc in probes.failed.items():
        reports[name].add("fail", str(exc.what) if isinstance(exc, HostUnreachable) else exc.full())
    for name, (probe, gpu_indices) in probes.succeeded.items():
        reports[name].probe = probe
        _judge_probe(reports[name], probe, gpu_indices, inv.host(name).gpus,
                     framework.judge_install(probe), framework.title)
        for level, text in judge_room(probe.get("workdir_free_bytes"), inv.job.disk_floor_bytes):
            reports[name].add(level, text)
        for level, text in framework.judge_import(probe, inv.host(name).gpus, inv.job):
            reports[name].add(level, text)
        if name in plan.hosts_used:
            for level, text in judge_hostname(probe, inv.job.framework, spread):
                reports[name].add(level, text)
    reachable = [n for n in probes.succeeded]
    busy, now = _check_ports(fleet, plan, reachable, reports)
    _check_gpus_free(fleet, plan, reachable, reports)
    _check_peers(fleet, now, reachable, busy, reports)
    return [reports[h.name] for h in inv.hosts]


def _probe(t: Transport, asks: tuple[str, ...],
           ask_hostname: bool = False) -> tuple[dict[str, Any], list[int] | None]:
    """The host's probe as data (the framework's judges, in inventory/, read it by key), asking
    what the framework asks (`Framework.asks_host`: "tensorflow", or another framework's name,
    agent fwprobe.py) and, where `ask_hostname`, what the host's name resolves to there; and
    the GPU indices nvidia-smi lists there (None: no nvidia-smi)."""
    probe = agentops.probe(t, t.host.workdir, ask_tf="tensorflow" in asks,
                           ask=tuple(a for a in asks if a != "tensorflow"),
                           ask_hostname=ask_hostname)
    gpus: list[int] | None = None
    if probe.nvidia_smi:
        res = t.run("nvidia-smi --query-gpu=index --format=csv,noheader", timeout_s=20)
        gpus = [int(x) for x in res.stdout.split() if x.strip().isdigit()] if res.ok else []
    return probe.to_wire(), gpus


def _judge_probe(report: HostReport, probe: Mapping[str, Any], found: list[int] | None,
                 wanted: tuple[int, ...], installed: list[tuple[Level, str]],
                 title: str) -> None:
    """Reached, its python, the framework's installation (`installed`), its GPUs."""
    report.add("ok", f"reachable as {probe.get('user')}@{probe.get('hostname')}, "
                     f"python {probe.get('python')} ({probe.get('executable')})")
    if probe.get("configured_python_missing"):
        report.add("fail", "the inventory's `python:` does not exist there yet (if `job.setup` "
                           f"creates it, run `tfctl setup`); {title} not checked")
        return
    for level, text in installed:
        report.add(level, text)
    if found is None:
        if wanted:
            report.add("fail", f"the inventory selects GPUs {list(wanted)} but nvidia-smi is not "
                               "on PATH there: set `gpus: 0` or install the NVIDIA driver")
        else:
            report.add("info", "no nvidia-smi: CPU only, as the inventory says")
        return
    missing = [g for g in wanted if g not in found]
    if missing:
        report.add("fail", f"GPUs {missing} selected in the inventory do not exist there "
                           f"(nvidia-smi lists {found})")
    else:
        extra = "" if len(found) == len(wanted) else f"; {len(found) - len(wanted)} not used"
        report.add("ok", f"{len(found)} GPUs found, {len(wanted)} selected{extra}")


def judge_room(free: int | None, floor: int) -> list[tuple[Level, str]]:
    """A warning when the workdir's filesystem has less room than `job.disk_floor_mb`."""
    if free is None or free >= floor:
        return []
    return [("warn", f"only {free / 2**20:.0f} MB free in the workdir's filesystem, below "
                     f"job.disk_floor_mb ({floor / 2**20:.0f} MB): a run that fills it keeps "
                     "training but stops its records and loses log output; make room there or "
                     "lower the floor")]


def _task_ports(plan: Plan, host: str) -> list[int]:
    return sorted({t.port for t in plan.on_host(host) if t.port is not None})


def _check_ports(fleet: Fleet, plan: Plan, hosts: list[str],
                 reports: dict[str, HostReport]) -> tuple[dict[str, set[int]], Plan]:
    """The written ports: busy is a failure. The others: which free ports `up` would take now
    (runs/up/ports.py). Also the plan with those, for the peers' check."""
    from tfctl.remote.runs.up.ports import NoFreePort, ask, chosen_plan, fixed_ports

    def look(t: Any) -> tuple[list[agentops.PortState], agentops.Raw | None]:
        wanted = ask(plan, t.host.name, None)
        return (agentops.ports(t, fixed_ports(plan, t.host.name)),
                None if wanted is None else agentops.choose_ports(t, wanted))

    answers = fleet.map(look, hosts)
    busy: dict[str, set[int]] = {h: set() for h in hosts}
    low, high = plan.inventory.job.ports.free_range
    found: dict[str, agentops.Raw] = {}
    for name, (result, chosen) in answers.succeeded.items():
        for state in result:
            if state.free:
                continue
            busy[name].add(state.port)
            reports[name].add("fail", f"port {state.port} is busy: {describe_holder(state.raw)}")
        if not busy[name] and fixed_ports(plan, name):
            reports[name].add("ok", f"task ports {fixed_ports(plan, name)} free")
        if chosen is None:
            continue
        if chosen.get("short"):
            reports[name].add("fail", NoFreePort(name, list(chosen["short"]), low, high).what)
            continue
        found[name] = chosen
        taken = ", ".join(f"{t} {p}" for t, p in chosen["chosen"].items())
        reports[name].add("ok", f"ports chosen at up from {low}-{high}; free now: {taken}")
    now = chosen_plan(plan, found)
    for name, exc in answers.failed.items():
        reports[name].add("fail", str(exc))
    return busy, now


def _check_gpus_free(fleet: Fleet, plan: Plan, hosts: list[str],
                     reports: dict[str, HostReport]) -> None:
    """Other users' or runs' compute processes on the GPUs the plan assigns: one fail each."""
    from tfctl.remote.gpus.busy import find_busy_gpus  # `check` only: not `up`'s import

    report = find_busy_gpus(fleet, plan, hosts)
    for name, state in report.hosts.items():
        if state.error:
            continue  # the probe has judged nvidia-smi already
        free = ", ".join(map(str, state.free)) or "none"
        for user in state.busy:
            reports[name].add("fail", f"{user.describe()} is using a GPU the plan assigns "
                                      f"(free GPUs there: {free})")
        for claimed in state.claimed:  # another user's reservation or run (remote/lab/claims)
            reports[name].add("fail", f"{claimed.describe()}: a GPU the plan assigns (free "
                                      f"GPUs there: {free})")
        for warning in state.warnings:
            reports[name].add("warn", warning)
        if not state.busy and not state.claimed:
            reports[name].add("ok", f"GPUs {list(state.assigned)} free of other processes "
                                    "and claims")
    for name, exc in report.unreachable.items():
        reports[name].add("fail", f"cannot check its GPUs: {exc}")


def describe_holder(state: Mapping[str, Any]) -> str:
    """`held by pid 4242 (alice: python train.py ...)`, from an agent `ports` entry."""
    pid = state.get("pid")
    if not pid:
        return f"held by a process of {state.get('user') or 'another user'} (pid not visible)"
    cmd = " ".join(state.get("cmdline") or []) if isinstance(state.get("cmdline"), list) \
        else str(state.get("cmdline") or "?")
    run = f", tfctl run {state['tfctl_run_id']}" if state.get("tfctl_run_id") else ""
    return f"held by pid {pid} ({state.get('user', '?')}: {cmd[:80]}{run})"


def _check_peers(fleet: Fleet, plan: Plan, hosts: list[str], busy: dict[str, set[int]],
                 reports: dict[str, HostReport]) -> None:
    if len(hosts) < 2:
        return
    free = {h: [p for p in _task_ports(plan, h) if p not in busy[h]] for h in hosts}
    listening = fleet.map(lambda t: agentops.listen(t, free[t.host.name], LISTEN_SECONDS),
                          hosts)
    up = [h for h in hosts if h in listening.succeeded and listening.succeeded[h].bound]
    for h in up:
        free[h] = [int(p) for p in listening.succeeded[h].bound]

    ports = [(host_port(plan.address_of(h), p), h) for h in up for p in free[h]]
    owner = dict(ports)  # a target → the host it names in the cluster spec

    def targets_for(me: str) -> list[str]:
        return [target for target, h in ports if h != me]

    connects = fleet.map(lambda t: agentops.connect(t, targets_for(t.host.name), 3), hosts)
    for src, result in connects.succeeded.items():
        for level, text in judge_peers(result, owner, plan.inventory):
            reports[src].add(level, text)
        if up and all(r.ok for r in result):
            reports[src].add("ok", f"reaches {len(targets_for(src))} task ports on its peers")
    # The listeners would exit by themselves after LISTEN_SECONDS; free the ports now.
    pids = {h: int(listening.succeeded[h].pid or 0) for h in up}
    fleet.map(lambda t: t.run(f"kill {pids[t.host.name]}"), [h for h in up if pids[h]])


def judge_peers(results: Sequence[ConnectResult], owner: Mapping[str, str],
                inv: Inventory) -> list[tuple[Level, str]]:
    """What a host found connecting to its peers' task ports (agent op `connect`; `owner`: each
    target's host): a name it cannot resolve is no firewall's doing, and is said apart from the
    ports it cannot reach."""
    title = framework_of(inv.job).title
    unresolved: dict[str, str] = {}
    for r in results:
        if not r.ok and r.why == "unresolved":
            name = r.target.rpartition(":")[0].strip("[]")
            unresolved.setdefault(name, owner.get(r.target, "?"))
    found: list[tuple[Level, str]] = []
    for name, host in unresolved.items():
        written = any(h.name == host and h.cluster_address for h in inv.hosts)
        fix = ("correct its `cluster_address:`" if written else
               "give it `cluster_address: <the IP or name the hosts know it by>`")
        found.append(("fail", f"cannot resolve {name!r}, the name the cluster spec gives {host}: "
                              f"{title}'s tasks here could not find it (no firewall is to "
                              f"blame); {fix}, or add the name to this host's /etc/hosts or DNS"))
    blocked = [r for r in results if not r.ok and r.why != "unresolved"]
    refused = [r.target for r in blocked if r.why == "refused"]
    other = [r.target for r in blocked if r.why != "refused"]
    if other:
        found.append(("fail", f"cannot reach {', '.join(other)} (a firewall between hosts?): "
                              f"{title} tasks must reach each other's ports"))
    if refused:
        found.append(("fail", f"cannot reach {', '.join(refused)}: refused while a listener "
                              "was there (a firewall that rejects, or the name is another "
                              f"machine from here): {title} tasks must reach each other's "
                              "ports"))
    return found

