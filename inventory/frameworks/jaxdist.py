"""JAX (`job.framework: jax`): one process per host (or per GPU), each handed JAX's and Keras 3's
multi-process environment, so `jax.distributed.initialize()` and `keras.distribution.initialize()`
find their coordinator.

What each process gets:
- JAX_COORDINATOR_ADDRESS: process 0's `address:port`, the one variable
  `jax.distributed.initialize()` reads itself (jax-ml/jax, `jax._src.distributed`); the process
  count and id it takes as arguments (or from a cluster it detects: Slurm, Open MPI), so tfctl
  hands them as JAX_NUM_PROCESSES and JAX_PROCESS_ID, and a plain JAX script passes them:
  `jax.distributed.initialize(num_processes=int(os.environ["JAX_NUM_PROCESSES"]),
  process_id=int(os.environ["JAX_PROCESS_ID"]))`;
- KERAS_DISTRIBUTION_JOB_ADDRESSES (every process's host at the coordinator's port, process 0
  first: Keras takes the first as the coordinator and checks the count),
  KERAS_DISTRIBUTION_NUM_PROCESSES and KERAS_DISTRIBUTION_PROCESS_ID, what
  `keras.distribution.initialize()` reads when called with no arguments (keras-team/keras,
  `keras.src.distribution.distribution_lib`), so a Keras 3 script runs unchanged;
- unless the inventory sets them: KERAS_BACKEND=jax (Keras 3's default backend is TensorFlow)
  and JAX_CPU_COLLECTIVES_IMPLEMENTATION=gloo (cross-process computations on CPU need it;
  JAX's default since 0.5, an environment variable since jax-ml/jax#26174).

`workers: per_host` (the default) runs one process per host on all its GPUs, JAX's usual way;
`per_gpu` one process per GPU, each seeing only its own. The group ends, or restarts whole,
as ranks.py says: JAX's runtime does not take a lost process back. JAX's gloo cannot be told its
interface: a job across hosts is refused where a host's name resolves to loopback (gloo.py).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from tfctl.inventory.frameworks import gloo, ranks
from tfctl.inventory.frameworks.interface import (
    Cluster,
    Handed,
    Hint,
    Level,
    host_port,
    not_installed_hint,
)
from tfctl.inventory.model import Job, WorkerLayout
from tfctl.inventory.tasks import Place

SHOWN = ("JAX_PROCESS_ID", "JAX_NUM_PROCESSES", "JAX_COORDINATOR_ADDRESS")


class Jax(ranks.Ranks):
    """JAX's coordinator and Keras 3's distribution variables for every process (`Framework`)."""

    name: str = "jax"
    title: str = "JAX"
    layouts: tuple[WorkerLayout, ...] = ("per_host", "per_gpu")  # per_host first: its default
    module: str = "jax"
    install: str = "pip install jax, or jax[cuda12] for GPUs"
    asks_host: tuple[str, ...] = ("jax",)
    shown_env: tuple[str, ...] = SHOWN

    @property
    def hints(self) -> tuple[Hint, ...]:
        return _hints()

    def hand(self, job: Job, place: Place, cluster: Cluster) -> Handed:
        if place.type != "worker":
            return Handed()
        r = ranks.Rank(place, cluster.places)
        port = r.coordinator.port
        assert port is not None  # rank 0 always has one (ranks.place)
        count, me = str(r.world_size), str(r.rank)
        env = {"JAX_COORDINATOR_ADDRESS": host_port(r.coordinator.address, port),
               "JAX_NUM_PROCESSES": count, "JAX_PROCESS_ID": me,
               "KERAS_DISTRIBUTION_JOB_ADDRESSES": ",".join(host_port(a, port)
                                                            for a in r.addresses),
               "KERAS_DISTRIBUTION_NUM_PROCESSES": count, "KERAS_DISTRIBUTION_PROCESS_ID": me}
        return Handed(env=env, env_defaults={"KERAS_BACKEND": "jax",
                                             "JAX_CPU_COLLECTIVES_IMPLEMENTATION": "gloo"})

    def judge_versions(self, versions: Mapping[str, str]) -> list[tuple[Level, str]]:
        if not versions.get("jaxlib"):
            return [("fail", f"jax {versions['jax']} is there without jaxlib: pip install "
                             "jaxlib (or jax[cuda12])")]
        keras = f", Keras {versions['keras']}" if versions.get("keras") else ""
        return [("ok", f"JAX {versions['jax']} (jaxlib {versions['jaxlib']}){keras}")]

    def judge_imported(self, said: Mapping[str, Any],
                       wanted: tuple[int, ...]) -> list[tuple[Level, str]]:
        gpus = list(said.get("gpus") or [])
        return [("ok", f"JAX {said.get('version')} sees {len(gpus)} GPU(s) (default backend "
                       f"{said.get('backend')})"),
                *ranks.too_few_gpus("JAX", said, wanted, "install jax[cuda12] there (the plain "
                                    "`jax` wheel runs on the CPU only)")]


def _hints() -> tuple[Hint, ...]:
    return (
        gloo.LOOPBACK_HINT,
        Hint(re.compile(r"Multiprocess computations aren't implemented on the CPU backend|"
                        r"[Mm]ultiprocess CPU computations"),
             "JAX computes across processes on the CPU only with a collectives implementation: "
             "set `JAX_CPU_COLLECTIVES_IMPLEMENTATION: gloo` in the env (tfctl hands it unless "
             "the inventory sets another), or "
             "`jax.config.update(\"jax_cpu_collectives_implementation\", \"gloo\")` before "
             "`jax.distributed.initialize()`"),
        Hint(re.compile(r"Number of processes must be defined|The process id of the current "
                        r"process must be defined|coordinator_address should be defined"),
             "jax.distributed.initialize() reads only JAX_COORDINATOR_ADDRESS itself: pass "
             "`num_processes=int(os.environ[\"JAX_NUM_PROCESSES\"]), "
             "process_id=int(os.environ[\"JAX_PROCESS_ID\"])`, or call "
             "keras.distribution.initialize(), which reads the KERAS_DISTRIBUTION_* variables"),
        not_installed_hint("jax", "JAX"),
        Hint(re.compile(r"Barrier timed out|DEADLINE_EXCEEDED.*(?:coordination|barrier)|"
                        r"Failed to connect to (?:the )?coordination service", re.IGNORECASE),
             "a process could not reach process 0's coordinator: JAX_COORDINATOR_ADDRESS "
             "(`tfctl plan`) must resolve on every host and its port be open between the hosts "
             "(`tfctl check --firewall`); or one process never started (its log says why)"),
    )


JAX = Jax()
