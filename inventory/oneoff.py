"""A one-off command as a job (`tfctl run -- CMD`), and a sweep of them (`--each KEY=V1,V2`).

Pure. A one-off is not the inventory's job: it takes the inventory's hosts and their defaults
(workdir, `python:`, env) and the job's setup, sync, outputs and notify, and leaves the job's
cluster shape (ps, workers per GPU, chief, evaluator, TensorBoard, the script and its args, the
restart policy) out. Its plan is one task, `worker:0`, on one host, on the N GPUs placed for it
(remote/queue/points.py): a worker because a worker is what tfctl's end rule, status, findings and
report already take for the process whose end is the job's (remote/runs/endrule.py: with no
chief, the job ends when its workers have), so a one-off run is a run like any other.

It is a job whose framework hands nothing, not an entry of `inventory/frameworks/`: a framework
says how a job's processes find each other (TF_CONFIG, torchrun's variables), and a one-off has
no peers to find; registering it would make `job.framework: command` a value the inventory took
with no meaning for `up`, and `check` would ask the hosts about a framework nobody runs. The env
is the plan builder's rule for every framework (`tasks.COMMON_ENV`, then the host's env with
`defaults.env`, then the device mask, which wins), without a framework's base env or what it
hands.

A sweep is the product of the `--each` lists: one point per combination, `{KEY}` in the
command replaced by the point's value. Each point is a run of its own, grouped by the sweep's
id (its manifest's `oneoff` record says the command, the name, the sweep and the point).
"""

from __future__ import annotations

import dataclasses
import itertools
import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tfctl.inventory.model import Host, Inventory, Job, RestartPolicy
from tfctl.inventory.tasks import COMMON_ENV, Place, Plan, Task

KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
PYTHONS = ("python", "python3")
"""A command's first word that stands for the host's `python:` (a venv's, often)."""
MAX_POINTS = 1000
"""More points than this is a mistake in the lists, not a sweep."""


class OneOffError(ValueError):
    """A one-off command line that cannot run: its sentence says what and how to fix it."""


@dataclass(frozen=True)
class Point:
    """One command of a sweep (or the one command of a plain `run`)."""

    argv: tuple[str, ...]
    values: tuple[tuple[str, str], ...] = ()
    """(KEY, value) in the order the `--each` options were given."""

    def words(self) -> str:
        """`seed=1 lr=0.1`, or the command for a run that is no sweep's point."""
        return " ".join(f"{k}={v}" for k, v in self.values) or shlex.join(self.argv)

    def to_json(self) -> dict[str, Any]:
        return {"argv": list(self.argv), "values": dict(self.values), "words": self.words()}


def parse_each(given: Sequence[str]) -> list[tuple[str, tuple[str, ...]]]:
    """`["seed=1,2,3", "lr=0.1,0.01"]` → [("seed", ("1", "2", "3")), ("lr", ("0.1", "0.01"))]."""
    out: list[tuple[str, tuple[str, ...]]] = []
    for text in given:
        key, eq, rest = text.partition("=")
        key = key.strip()
        if not eq or not KEY.match(key):
            raise OneOffError(f"--each {text!r} is not KEY=V1,V2,...: write e.g. "
                              "`--each seed=1,2,3` and `{seed}` in the command")
        values = tuple(v.strip() for v in rest.split(","))
        if not rest.strip() or any(not v for v in values):
            raise OneOffError(f"--each {key}= has an empty value: list them with commas, "
                              f"e.g. `--each {key}=1,2,3`")
        if any(k == key for k, _ in out):
            raise OneOffError(f"--each {key} is given twice: put all its values in one list")
        out.append((key, values))
    return out


def points(argv: Sequence[str], each: Sequence[tuple[str, tuple[str, ...]]]) -> list[Point]:
    """The sweep's points, in the order of the product of the lists (the first `--each`
    varies slowest); one point, the command itself, without `--each`."""
    if not argv or not argv[0].strip():
        raise OneOffError("no command to run: give it after `--`, e.g. "
                          "`tfctl run -- python train.py`")
    for key, _ in each:
        if not any("{" + key + "}" in arg for arg in argv):
            raise OneOffError(f"--each {key}: `{{{key}}}` appears nowhere in the command, so "
                              f"every point would run the same command: write `{{{key}}}` "
                              "where its value goes")
    count = 1
    for _, values in each:
        count *= len(values)
    if count > MAX_POINTS:
        raise OneOffError(f"--each makes {count} points, more than {MAX_POINTS}: shorten the "
                          "lists")
    out = []
    for combo in itertools.product(*(values for _, values in each)):
        chosen = tuple(zip((k for k, _ in each), combo, strict=True))
        out.append(Point(tuple(_substitute(arg, chosen) for arg in argv), chosen))
    return out


def _substitute(arg: str, chosen: Sequence[tuple[str, str]]) -> str:
    for key, value in chosen:
        arg = arg.replace("{" + key + "}", value)
    return arg


def command_on(host: Host, argv: Sequence[str]) -> tuple[str, ...]:
    """`argv` as it runs on `host`: a leading `python` (or `python3`) is the host's `python:`."""
    if argv and argv[0] in PYTHONS:
        return (host.python, *argv[1:])
    return tuple(argv)


def gpu_hosts(inv: Inventory) -> dict[str, int | None]:
    """Host → how many GPUs a one-off may take there: the GPUs the inventory selects, None for
    a `gpus: free` host (as many as nvidia-smi lists, known once asked)."""
    return {h.name: None if h.free_gpus is not None else len(h.gpus) for h in inv.hosts}


def too_many_gpus(inv: Inventory, wanted: int, listed: Mapping[str, int] | None = None,
                  host: str | None = None) -> str | None:
    """Why no host of `inv` (or `host`) can ever give `wanted` GPUs, in a sentence, or None
    (also while a `gpus: free` host has not said how many it has). `listed`: the GPUs each
    `gpus: free` host's nvidia-smi listed, where it was asked."""
    counts = {name: (listed or {}).get(name) if n is None else n
              for name, n in gpu_hosts(inv).items() if host is None or name == host}
    if wanted <= 0 or not counts or any(n is None or n >= wanted for n in counts.values()):
        return None
    known = {name: n for name, n in counts.items() if n is not None}
    if host is not None:
        return (f"host {host} has {_gpus(known[host])} that the inventory lets tfctl use, "
                f"not {wanted}: ask for fewer with --gpus, or leave --host out")
    biggest = max(known, key=lambda name: known[name])
    return (f"no host has {wanted} GPUs: the largest is {biggest}, with {_gpus(known[biggest])}"
            "; ask for fewer with --gpus")


def _gpus(n: int) -> str:
    return f"{n} GPU" + ("" if n == 1 else "s")


def oneoff_inventory(inv: Inventory, host: str, gpus: Sequence[int]) -> Inventory:
    """`inv` as a one-off on `host` sees it: that host alone, on `gpus` (no longer `free`), and
    the job without its cluster shape (no chief, evaluator, TensorBoard or restart policy; the
    style `none`), keeping its sync, setup, outputs, notify, log and silence settings."""
    kept = dataclasses.replace(inv.host(host), gpus=tuple(gpus), free_gpus=None, ps=0,
                               cpu_workers=1)
    j = inv.job
    job = Job(script=j.script, style="none", sync=j.sync, setup=j.setup,
              setup_inputs=j.setup_inputs, restart=RestartPolicy(), throughput=j.throughput,
              outputs=j.outputs, silence_window_s=j.silence_window_s,
              log_max_bytes=j.log_max_bytes, disk_floor_bytes=j.disk_floor_bytes,
              notify=j.notify)
    return dataclasses.replace(inv, hosts=(kept,), job=job)


def oneoff_plan(inv: Inventory, host: str, gpus: Sequence[int], point: Point,
                run: Mapping[str, Any]) -> Plan:
    """The plan of one point on `host`'s `gpus` (none: CPU only): `worker:0`, handed nothing,
    in the host's workdir, with the mask and `CUDA_DEVICE_ORDER=PCI_BUS_ID` (nvidia-smi's
    indices) as every task has them. `run`: what the run's manifest records of it (`oneoff`:
    the command, the name, the sweep and the point)."""
    narrowed = oneoff_inventory(inv, host, gpus)
    h = narrowed.host(host)
    mask = ",".join(str(g) for g in gpus)
    env = dict(COMMON_ENV)
    env.update(h.env)
    env["CUDA_VISIBLE_DEVICES"] = mask
    address = h.cluster_address or h.address
    task = Task("worker", 0, host, address, None, mask, env, h.workdir,
                command_on(h, point.argv))
    place = Place("worker", 0, host, address, None, mask)
    return Plan(inventory=narrowed, tasks=(task,), addresses={host: address}, places=(place,),
                oneoff=dict(run))
