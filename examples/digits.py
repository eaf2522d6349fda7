"""The digits model shared by train.py and evaluate.py: data split, MLP, checkpoint keys, output.

Kept apart from the training styles so the evaluator (and every style) agrees on one variable
naming and checkpoint layout: `model/<name>/.ATTRIBUTES/VARIABLE_VALUE` and the step key, under
`<train_dir>/ckpt/ckpt-<step>`.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")

import numpy as np
import tensorflow as tf

HIDDEN_UNITS = 64
NUM_CLASSES = 10
HELD_OUT_FRACTION = 0.2
SPLIT_SEED = 0
VARIABLE_NAMES = ("hidden_kernel", "hidden_bias", "output_kernel", "output_bias")
STEP_KEY = "step/.ATTRIBUTES/VARIABLE_VALUE"
CHECKPOINT_SUBDIR = "ckpt"
CHECKPOINT_NAME = "ckpt"
DONE_FILE = "DONE"
STOP_GRACE_SECS = 5
WORKER_POLL_SECS = 1


def variable_key(name: str) -> str:
    """The checkpoint key of one model variable, identical in every style."""
    return f"model/{name}/.ATTRIBUTES/VARIABLE_VALUE"


def load_digits_split() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(x_train, y_train, x_held_out, y_held_out): the same seeded split in every process.

    Reads scikit-learn's bundled digits.csv.gz directly when it is where load_digits keeps it:
    importing sklearn costs ~1 s of CPU per process, and a cluster starts several processes.
    """
    spec = importlib.util.find_spec("sklearn")
    csv = Path(spec.origin).parent / "datasets/data/digits.csv.gz" if spec and spec.origin else None
    if csv is not None and csv.is_file():
        table = np.loadtxt(csv, delimiter=",")
        data, target = table[:, :-1], table[:, -1]
    else:
        from sklearn.datasets import load_digits

        digits = load_digits()
        data, target = digits.data, digits.target
    images, labels = (data / 16.0).astype(np.float32), target.astype(np.int32)
    order = np.random.RandomState(SPLIT_SEED).permutation(len(labels))
    held_out = int(len(labels) * HELD_OUT_FRACTION)
    test, train = order[:held_out], order[held_out:]
    return images[train], labels[train], images[test], labels[test]


def initial_values(num_features: int) -> dict[str, np.ndarray]:
    """Seeded Glorot-uniform weights, so every worker and every style starts alike."""
    rng = np.random.RandomState(SPLIT_SEED + 1)

    def glorot(rows: int, cols: int) -> np.ndarray:
        limit = np.sqrt(6.0 / (rows + cols))
        return rng.uniform(-limit, limit, size=(rows, cols)).astype(np.float32)

    return {
        "hidden_kernel": glorot(num_features, HIDDEN_UNITS),
        "hidden_bias": np.zeros(HIDDEN_UNITS, np.float32),
        "output_kernel": glorot(HIDDEN_UNITS, NUM_CLASSES),
        "output_bias": np.zeros(NUM_CLASSES, np.float32),
    }


def forward(params: dict[str, Any], images: Any) -> Any:
    """Logits of the MLP; shared by training (variables) and evaluation (restored tensors)."""
    hidden = tf.nn.relu(tf.matmul(images, params["hidden_kernel"]) + params["hidden_bias"])
    return tf.matmul(hidden, params["output_kernel"]) + params["output_bias"]


def loss_and_accuracy(logits: Any, labels: Any) -> tuple[Any, Any]:
    """Mean cross-entropy and mean accuracy of one batch."""
    loss = tf.reduce_mean(
        tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits))
    hits = tf.cast(tf.equal(tf.argmax(logits, axis=1, output_type=tf.int32), labels), tf.float32)
    return loss, tf.reduce_mean(hits)


class DigitsMLP(tf.Module):
    """The model's variables. MEAN aggregation lets MultiWorkerMirrored average SGD updates."""

    def __init__(self, num_features: int) -> None:
        super().__init__(name="digits_mlp")
        for name, value in initial_values(num_features).items():  # attribute name = ckpt key
            setattr(self, name, tf.Variable(value, name=name,
                                            aggregation=tf.VariableAggregation.MEAN))

    def params(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in VARIABLE_NAMES}

    def __call__(self, images: Any) -> Any:
        return forward(self.params(), images)


@dataclass
class Window:
    """Running means over one logging window, and the last finished window's means."""

    first_step: int = 0  # global step when the window opened
    started: float = field(default_factory=time.monotonic)
    steps: int = 0
    loss_sum: float = 0.0
    accuracy_sum: float = 0.0
    last: tuple[float, float] = (float("nan"), float("nan"))

    def add(self, loss: float, accuracy: float) -> None:
        self.steps += 1
        self.loss_sum += loss
        self.accuracy_sum += accuracy

    def close(self, step: int) -> dict[str, float]:
        """Print the window's log line (rate in global steps), open the next, return means."""
        elapsed = max(time.monotonic() - self.started, 1e-9)
        if self.steps:
            self.last = (self.loss_sum / self.steps, self.accuracy_sum / self.steps)
        loss, accuracy = self.last
        print(f"step {step} loss={loss:.4f} accuracy={accuracy:.4f} "
              f"steps_per_sec={(step - self.first_step) / elapsed:.1f}", flush=True)
        self.first_step, self.started = step, time.monotonic()
        self.steps, self.loss_sum, self.accuracy_sum = 0, 0.0, 0.0
        return {"loss": loss, "accuracy": accuracy}


def write_scalars(writer: Any, step: int, scalars: dict[str, float]) -> None:
    """TensorBoard scalars via the core summary op: tf.summary.scalar needs the tensorboard
    package, which TensorFlow 2.21 no longer pulls in and tfctl keeps in its own venv."""
    metadata = tf.compat.v1.SummaryMetadata(
        plugin_data=tf.compat.v1.SummaryMetadata.PluginData(plugin_name="scalars"))
    with writer.as_default():
        for tag, value in scalars.items():
            tf.summary.write(tag, tf.constant(value, tf.float32), step=step,
                             metadata=metadata.SerializeToString())
    writer.flush()


def prepare_result_dir(train_dir: str) -> None:
    """Create the train dir; drop a stale DONE, which would stop a fresh evaluator at once."""
    os.makedirs(train_dir, exist_ok=True)
    with contextlib.suppress(FileNotFoundError):
        os.remove(os.path.join(train_dir, DONE_FILE))


def finish(train_dir: str, style: str, step: int, losses: tuple[float, float],
           seconds: float, checkpoint: str | None) -> None:
    """Print the RESULT line and write DONE (same JSON plus the final checkpoint)."""
    result = {"steps": step, "loss": round(losses[0], 6), "accuracy": round(losses[1], 6),
              "seconds": round(seconds, 3), "train_dir": train_dir, "style": style}
    marker = os.path.join(train_dir, DONE_FILE)
    with open(marker + ".tmp", "w") as stream:  # whole or absent, never half-written
        # tfctl's run id (None outside tfctl): an evaluator of a later run reusing this train
        # dir knows this DONE is not its own job's, even before the new chief removes it.
        json.dump({**result, "checkpoint": checkpoint,
                   "run_id": os.environ.get("TFCTL_RUN_ID")}, stream)
    os.replace(marker + ".tmp", marker)
    print("RESULT " + json.dumps(result), flush=True)


def due(step: int, every: int, last_step: int) -> bool:
    """Whether a log line or checkpoint falls on `step` (the last step always gets both)."""
    return step % every == 0 or step == last_step
