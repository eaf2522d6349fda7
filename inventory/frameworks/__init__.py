"""The frameworks a job can run, by name: how its tasks find each other, one entry each.

A framework is one object (`interface.Framework`) that answers every framework question tfctl
asks, so that nothing outside this package knows a framework's keys, environment or flags:

- what the loader makes of the job's keys (`resolve_job`: the style, the worker layout, whose
  default is `layouts[0]`, the ports, whether its tasks restart together) and of a host's
  (`host_ps`), refusing what the framework cannot honour where it is written;
- where the job's processes run (`place`: roles, ports, GPU masks; the roles it allows, the
  worker layouts it runs) and how each learns its place (`hand`: the env and args the
  framework's code reads, e.g. TensorFlow's TF_CONFIG); `inventory/plan.py` calls both, and
  `plan.with_ports` calls `hand` again when `up` chose other ports;
- its rules on a finished plan (`refusals`, `warnings`), which `inventory/rules.py` applies;
- whether its workers are one process group that lives and ends whole (`one_group`): the end
  rule (`remote/runs/endrule.py`, mode `group`), the acting chief (`remote/runs/status.py`),
  what `tfctl check` says is exposed and the Slurm script's words ask it;
- what `tfctl check` asks each host about it and what it makes of the answer (`asks_host`,
  `judge_install`, `judge_import`; remote/runs/check.py), and the hints for its known failures
  in a task's log (`hints`; remote/runs/failure.py).

The entries: TensorFlow (`tensorflow/`, every job's unless it says otherwise), PyTorch
(`pytorch.py`, `job.framework: torch`: torchrun's environment) and JAX (`jaxdist.py`,
`job.framework: jax`: JAX's coordinator and Keras 3's distribution variables); the last two
share `ranks.py` (one process group whose rank 0 coordinates, how it ends, what the loader
makes of its keys, `rankkeys.py`, and what `check` makes of its probe answer). The files a new
framework touches:

1. `inventory/frameworks/<name>.py`: the entry, the `Framework` Protocol's members (a process
   group like torch's: a `ranks.Ranks` with its name, title, module, install command, what it
   hands and what it alone says of the host's import; tests/unit/test_framework_seam.py's
   `Gang` is one);
2. this file: one line in `FRAMEWORKS` (the schema takes every name here for `job.framework`);
3. only if `tfctl check` must ask the hosts about it (its version, the GPUs it sees): the
   agent's probe, which runs on the hosts and imports nothing of tfctl's inventory
   (`remote/agent/fwprobe.py`: its distributions, what must be installed before it is asked,
   the code that asks it);
4. only if `tfctl export slurm` (and `up --on slurm`) must run it, which refuses it in one
   sentence until then: the sbatch script computes each rank's address variables itself from
   the allocation (`remote/exporters/slurm.py` `GROUP_ADDRESS_ENV`, and `tfctl_group_env` in
   its shell part, slurm_sh.py), so it learns the new ones there.

The schema, the loader, the plan builder, `with_ports`, the rules' front, the end rule,
`status`, `check`, `tfctl plan`'s header and the failure hints need no change.
"""

from __future__ import annotations

from tfctl.inventory.frameworks.interface import Framework, Hint
from tfctl.inventory.frameworks.jaxdist import JAX
from tfctl.inventory.frameworks.pytorch import PYTORCH
from tfctl.inventory.frameworks.tensorflow import TENSORFLOW
from tfctl.inventory.model import Job

FRAMEWORKS: dict[str, Framework] = {f.name: f for f in (TENSORFLOW, PYTORCH, JAX)}
"""Every framework a job can name, by `Framework.name`."""

DEFAULT_FRAMEWORK: Framework = TENSORFLOW
"""The framework of a job that names none (`Job.framework`'s default), and the one whose keys
a file without a job is checked against."""


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
