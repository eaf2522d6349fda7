"""The frameworks a job can run, by name: how its tasks find each other, one entry each.

A framework is one object (`interface.Framework`) that answers every framework question tfctl
asks, so that nothing outside this package knows a framework's environment or flags:

- where the job's processes run (`place`: roles, ports, GPU masks; the roles it allows, the
  worker layouts it runs) and how each learns its place (`hand`: the env and args the
  framework's code reads, e.g. TensorFlow's TF_CONFIG); `inventory/plan.py` calls both, and
  `plan.with_ports` calls `hand` again when `up` chose other ports;
- its rules on a finished plan (`refusals`, `warnings`), which `inventory/rules.py` applies;
- what `tfctl check` asks each host about it and what it makes of the answer (`asks_host`,
  `judge_install`, `judge_host`; remote/runs/check.py), and the hints for its known failures in
  a task's log (`hints`; remote/runs/failure.py).

The entries: TensorFlow (`tensorflow/`, every job's unless it says otherwise), PyTorch
(`pytorch.py`, `job.framework: torch`: torchrun's environment) and JAX (`jaxdist.py`,
`job.framework: jax`: JAX's coordinator and Keras 3's distribution variables); the last two
share `ranks.py` (one process group whose rank 0 coordinates, and how it ends). The files a new
framework touches:

1. `inventory/frameworks/<name>.py`: the entry, the `Framework` Protocol's members;
2. this file: one line in `FRAMEWORKS`;
3. where the inventory names it: the `job.framework` key's values (`inventory/schema.py`) and
   any key of its own the loader resolves (`inventory/load.py`), as TensorFlow's
   `job.strategy` is (`tensorflow/strategy.py`);
4. only if `tfctl check` must ask the hosts something new about it (its version, the GPUs it
   sees): the agent's probe (`remote/agent/hostops.py` `op_probe` and a module beside
   `remote/agent/tfprobe.py`, listed in `remote/connect/session/program.py`), the probe
   request (`remote/agent/vocab.py`, `remote/connect/session/agentops.py`) and the mapping of
   `asks_host` onto it in `remote/runs/check.py`;
5. only if `tfctl export slurm` must run it: the sbatch script computes each task's cluster
   env itself from the allocation (the Slurm exporter's shell part), so it learns the new env
   there;
6. only if its job ends otherwise than by a chief's or every worker's end: the end rule
   (`remote/runs/endrule.py`, what the hosts' watchers apply, `remote/agent/watch.py`) and the
   client's reading of it (`remote/runs/status.py`), as the group of ranks' end (mode `group`,
   style `env`) is there. PyTorch, the second entry, needed all six (and the mode and style,
   which JAX, the third, then shared); JAX needed 1, 2, 3 and a probe and a Slurm case of its
   own.

The plan builder, `with_ports`, the rules' front, check and the failure hints need no change.
"""

from __future__ import annotations

from tfctl.inventory.frameworks.interface import Framework, Hint
from tfctl.inventory.frameworks.jaxdist import JAX
from tfctl.inventory.frameworks.pytorch import PYTORCH
from tfctl.inventory.frameworks.tensorflow import TENSORFLOW
from tfctl.inventory.model import Job

FRAMEWORKS: dict[str, Framework] = {f.name: f for f in (TENSORFLOW, PYTORCH, JAX)}
"""Every framework a job can name, by `Framework.name`."""


def framework_of(job: Job) -> Framework:
    """The framework `job` runs."""
    return FRAMEWORKS[job.framework]


def known_hints(first: str | None = None) -> tuple[Hint, ...]:
    """Every framework's known failures, the job's own (`first`, a `Framework.name`) before the
    others', else in registry order: a log does not say which framework wrote it, and a
    framework's own hint is the one that knows its error (gloo's `Connection refused` also
    matches TensorFlow's generic hint). A hint two frameworks share (gloo's loopback address,
    `gloo.py`) is listed once, and first where no job is named: it is some framework's own."""
    order = sorted(FRAMEWORKS.values(), key=lambda framework: framework.name != first)
    listed = [hint for framework in order for hint in framework.hints]
    if first is None:
        listed = [hint for hint in listed if listed.count(hint) > 1] + listed
    return tuple(dict.fromkeys(listed))
