"""A tiny multi-process JAX job: tfctl runs it with `job.framework: jax` (examples/jax.yaml).

`jax.distributed.initialize()` reads JAX_COORDINATOR_ADDRESS itself; the process count and id
are passed from JAX_NUM_PROCESSES and JAX_PROCESS_ID, which tfctl hands every process (JAX takes
them only as arguments, or from a cluster it detects: Slurm, Open MPI). Every device of every
process adds its process's number with `psum`; process 0 prints `RESULT {...}`. On CPUs the
cross-process sum needs JAX's gloo collectives (JAX_CPU_COLLECTIVES_IMPLEMENTATION=gloo, which
tfctl sets unless the inventory sets another). Needs only jax (`pip install jax`).
"""

from __future__ import annotations

import json
import os

import jax
import jax.numpy as jnp


def main() -> None:
    jax.distributed.initialize(num_processes=int(os.environ["JAX_NUM_PROCESSES"]),
                               process_id=int(os.environ["JAX_PROCESS_ID"]))
    me, count = jax.process_index(), jax.process_count()
    local = jax.local_device_count()
    mine = jnp.full((local,), me + 1.0)
    total = jax.pmap(lambda x: jax.lax.psum(x, "devices"), axis_name="devices")(mine)
    expected = local * count * (count + 1) / 2  # every process has as many devices here
    if me == 0:
        print("RESULT " + json.dumps({"processes": count, "devices": jax.device_count(),
                                      "psum": float(total[0]), "expected": expected}),
              flush=True)
    jax.distributed.shutdown()
    if float(total[0]) != expected:
        raise SystemExit(f"process {me}: psum {float(total[0])}, expected {expected}")


if __name__ == "__main__":
    main()
