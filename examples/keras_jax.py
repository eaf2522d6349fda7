"""A tiny Keras 3 job on JAX across hosts: `keras.distribution.initialize()` with no arguments
reads KERAS_DISTRIBUTION_JOB_ADDRESSES, _NUM_PROCESSES and _PROCESS_ID, which tfctl hands every
process with `job.framework: jax` (examples/jax.yaml, `script: keras_jax.py`), with
KERAS_BACKEND=jax. The model is trained data-parallel over every device of every process: each
process feeds its own batches and the gradients are summed across them. Process 0 prints
`RESULT {...}`. Needs keras and jax (`pip install keras jax`).
"""

from __future__ import annotations

import json

import keras
import numpy as np


def main() -> None:
    keras.distribution.initialize()
    import jax  # the backend, initialised by Keras above

    devices = keras.distribution.list_devices()
    mesh = keras.distribution.DeviceMesh((len(devices),), ["batch"], devices)
    # Each process reads its own rows (auto_shard_dataset=False: they are not one dataset to cut).
    keras.distribution.set_distribution(keras.distribution.DataParallel(
        device_mesh=mesh, auto_shard_dataset=False))
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.SGD(0.05), loss="mse")
    rows = np.random.default_rng(jax.process_index()).normal(size=(256, 8)).astype("float32")
    history = model.fit(rows, rows.sum(axis=1, keepdims=True), epochs=3,
                        batch_size=32 * len(devices) // jax.process_count(), verbose=2)
    if jax.process_index() == 0:
        print("RESULT " + json.dumps({"processes": jax.process_count(),
                                      "devices": len(devices),
                                      "loss": round(float(history.history["loss"][-1]), 4)}),
              flush=True)


if __name__ == "__main__":
    main()
