"""`up`'s check: what each host answers before anything starts anywhere, and how it is judged.

One `up_check` agent request per host (host side remote/agent/up.py) carries every question:
does the synced tree differ (the client sends the digests of its listing), is the setup cached,
what nvidia-smi says of the plan's GPUs (with the host's claims), are the written task ports
free, which free ports the tasks take whose port the inventory leaves out (`ports.py`,
leased under the `up`'s token), and, for a JAX job across hosts, what each host's name resolves
to (`judge_hostnames`). It starts nothing.

A host is in one of three states after it: it answered; its agent cannot run yet (no Python:
the setup may be what installs it), and then `up`'s work phase syncs and sets it up through the
shell and checks it again; or it could not be checked at all (unreachable, a refused key), and
`up` fails at the first phase that needed it, with that host's error.
"""

from __future__ import annotations

import base64
import zlib
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tfctl.inventory.frameworks.gloo import REFUSED_ON_LOOPBACK, is_loopback, loopback_refusal
from tfctl.inventory.plan import Plan
from tfctl.remote.connect.fleet import Fleet
from tfctl.remote.connect.session import agentclient, agentops
from tfctl.remote.connect.session.agentops import UpCheck
from tfctl.remote.errors import GpusBusy, LaunchFailed, PythonMissing, RemoteError
from tfctl.remote.runs.check import describe_holder
from tfctl.remote.runs.setup import commands_digest
from tfctl.remote.runs.steps import WARNING, OnEvent
from tfctl.remote.runs.up.ports import ask, fixed_ports
from tfctl.remote.sync.rsync import SourceListing

if TYPE_CHECKING:
    from tfctl.remote.gpus.busy import BusyReport

NOTHING_LISTED = base64.b64encode(zlib.compress(b"[]")).decode()
"""An empty listing as `up_check` takes it (JSON `[]`, zlib, base64): the source could not be
listed, so the host's answer is not used and the whole tree is sent."""


@dataclass(frozen=True)
class Checked:
    """Every host's state after the check."""

    answers: Mapping[str, UpCheck]
    """The hosts that answered."""
    agentless: Mapping[str, RemoteError]
    """The hosts whose agent cannot run yet (`PythonMissing`): synced and set up through the
    shell, then checked again."""
    failed: Mapping[str, RemoteError]
    """The hosts that could not be checked (unreachable, refused, ...)."""

    def update(self, again: Checked) -> Checked:
        """These states with the hosts checked `again` in theirs."""
        hosts = set(again.answers) | set(again.agentless) | set(again.failed)

        def kept(states: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, Any]:
            return {**{h: v for h, v in states.items() if h not in hosts}, **new}

        return Checked(kept(self.answers, again.answers), kept(self.agentless, again.agentless),
                       kept(self.failed, again.failed))


def check_hosts(fleet: Fleet, plan: Plan, hosts: Sequence[str],
                listing: Future[SourceListing] | None, setup: bool, token: str) -> Checked:
    """One `up_check` on each of `hosts`: with the sync's digests where `listing` is given (not
    for `shared_fs` hosts: they are never synced), the setup cache where `setup`, the GPUs and
    ports where the plan uses the host."""
    inv = fleet.inventory
    job = inv.job
    asked = {"digest": commands_digest(job.setup), "inputs": list(job.setup_inputs)} \
        if setup and job.setup else None
    tokens = gpu_tokens(plan)
    shared = {h.name for h in inv.hosts if h.shared_fs}
    ask_hostname = job.framework in REFUSED_ON_LOOPBACK and len(plan.hosts_used) > 1

    def check(t: Any) -> UpCheck:
        name = t.host.name
        entries = None
        if listing is not None and name not in shared:
            agentclient.prestart(t)  # connect and start the agent while the listing finishes
            entries = listing.result().blob or NOTHING_LISTED
        used = name in plan.hosts_used
        script = _nvsmi_script() if tokens.get(name) else None
        return agentops.up_check(t, t.host.workdir, entries=entries, setup=asked,
                                 gpus_script=script,
                                 port_numbers=fixed_ports(plan, name) if used else (),
                                 choose=ask(plan, name, token) if used else None,
                                 ask_hostname=ask_hostname and used)

    result = fleet.map(check, hosts)
    agentless = {h: e for h, e in result.failed.items() if isinstance(e, PythonMissing)}
    return Checked(dict(result.succeeded), agentless,
                   {h: e for h, e in result.failed.items() if h not in agentless})


def judge_gpus(fleet: Fleet, plan: Plan, checks: Mapping[str, UpCheck], force: bool,
               say: OnEvent) -> None:
    """The busy-GPU check on the listings the checks brought (`GpusBusy` unless `force`)."""
    tokens = gpu_tokens(plan)
    if not tokens:
        return
    from tfctl.remote.gpus.busy import BusyReport, judge_listing

    judged = fleet.map(lambda t: judge_listing(t, checks[t.host.name].gpus_stdout or "",
                                               tokens[t.host.name],
                                               claims=checks[t.host.name].claims),
                       list(tokens))
    judge_busy(BusyReport(dict(judged.succeeded), dict(judged.failed)), force, say)


def judge_hostnames(plan: Plan, checks: Mapping[str, UpCheck]) -> None:
    """Raise `LaunchFailed` for the first host of a JAX job across hosts whose name resolves
    to loopback there: JAX's gloo would advertise it, and JAX has no setting for the
    interface (inventory/frameworks/gloo.py)."""
    for host in plan.hosts_used:
        check = checks.get(host)
        loopback = [a for a in check.hostname_addresses if is_loopback(a)] if check else []
        if check is not None and loopback:
            raise LaunchFailed(host, f"a {plan.inventory.job.framework.upper()} job across "
                               f"hosts cannot run there: "
                               f"{loopback_refusal(check.hostname or host, loopback)}")


def judge_busy(report: BusyReport, force: bool, on_event: OnEvent) -> None:
    """Warn of hosts whose GPUs could not be checked; busy ones raise `GpusBusy` unless `force`."""
    for line in report.unknown_lines():
        on_event(WARNING + line)
    if not report.busy:
        return
    if force:
        on_event(WARNING + "launching anyway (--force) onto GPUs in use: "
                 + "; ".join(report.busy_lines()))
        return
    raise GpusBusy(tuple(report.busy_lines()), report.free_text())


def judge_ports(host: str, states: Iterable[agentops.PortState], plan: Plan) -> None:
    """Raise `LaunchFailed` for the first task port that is taken on `host`."""
    for state in states:
        port = state.port
        if not state.free:
            task = next(x.name for x in plan.on_host(host) if x.port == port)
            if state.run_id:
                raise LaunchFailed(host, f"run {state.run_id} is still live there "
                                         f"(its {state.task} holds port {port}): "
                                         "run `tfctl down` first")
            raise LaunchFailed(host, f"port {port} (for {task}) is already in use: "
                                     f"{describe_holder(state.raw)}; stop it or change job.ports")


def gpu_tokens(plan: Plan) -> dict[str, tuple[str, ...]]:
    """host → the GPUs its tasks' masks name, for the hosts where they name any (the busy-GPU
    module is loaded only for such a plan)."""
    hosts = [h for h in plan.hosts_used
             if any(t.cuda_visible_devices.strip() for t in plan.on_host(h))]
    if not hosts:
        return {}
    from tfctl.remote.gpus.busy import mask_tokens

    return {h: tokens for h in hosts if (tokens := mask_tokens(plan, h))}


def _nvsmi_script() -> str:
    from tfctl.remote.gpus.busy import nvsmi_script

    return nvsmi_script()
