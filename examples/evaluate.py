"""Evaluator for the bundled example: watches a train dir, scores each new checkpoint.

The classic ``--eval_interval_secs`` loop beside training: whenever ``<train_dir>/ckpt`` gets a
new checkpoint it is scored on the held-out split of the digits (the split train.py never trains
on), the result printed as ``eval step N loss=.. accuracy=..`` and written as TensorBoard scalars
to ``<train_dir>/eval``. It stops with status 0 once it has scored the checkpoint named in
``<train_dir>/DONE`` (written by the task that owns the training result), or after ``--max_evals``
evaluations; after ``--timeout_secs`` it stops with 0 if it scored anything, 1 if not.

Checkpoints are read tensor by tensor (``tf.train.load_checkpoint``) under the key layout that
every training style writes (see train.py), so object-based checkpoints (TF2 styles) and Saver
checkpoints (classic flags style) are read by the same code. It runs no strategy: a TF_CONFIG
naming it ``evaluator`` is ignored, and it needs no GPU.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # digits.py sits beside us
import digits

tf = digits.tf


def read_done_step(train_dir: str, run_id: str | None = None) -> int | None:
    """The final global step from DONE, or None while training is still going.

    Under tfctl (`run_id` is our TFCTL_RUN_ID) a DONE naming another run is a previous job's
    in a reused train dir, still there because the new chief starts beside us and has not
    removed it yet: it must not end this evaluation at once."""
    try:
        with open(os.path.join(train_dir, digits.DONE_FILE)) as marker:
            done = json.load(marker)
        steps = int(done["steps"])
    except FileNotFoundError:
        return None
    except (ValueError, KeyError, TypeError) as error:  # half-written marker: look again later
        print(f"eval: DONE not readable yet ({error})", flush=True)
        return None
    if run_id and done.get("run_id") and done["run_id"] != run_id:
        return None
    return steps


def restore(checkpoint_path: str) -> tuple[int, dict[str, Any]]:
    """(global step, {variable name: value}) of one checkpoint, in the shared key layout."""
    reader = tf.train.load_checkpoint(checkpoint_path)
    keys = reader.get_variable_to_shape_map()
    missing = [key for key in (digits.STEP_KEY, *map(digits.variable_key, digits.VARIABLE_NAMES))
               if key not in keys]
    if missing:
        raise KeyError(f"{checkpoint_path} lacks {missing}; it holds {sorted(keys)}")
    params = {name: reader.get_tensor(digits.variable_key(name)) for name in digits.VARIABLE_NAMES}
    return int(reader.get_tensor(digits.STEP_KEY)), params


def evaluate(params: dict[str, Any], images: np.ndarray, labels: np.ndarray) -> tuple[float, float]:
    """(loss, accuracy) of the whole held-out split."""
    loss, accuracy = digits.loss_and_accuracy(digits.forward(params, images), labels)
    return float(loss), float(accuracy)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    train_dir = os.path.abspath(args.train_dir)
    ckpt_dir = os.path.join(train_dir, digits.CHECKPOINT_SUBDIR)
    _, _, images, labels = digits.load_digits_split()
    writer = None
    started, evaluated, last_path, last_step = time.monotonic(), 0, None, -1
    print(f"eval watching {ckpt_dir} every {args.eval_interval_secs}s", flush=True)
    while True:
        # Read before the checkpoint: no race with DONE.
        done_step = read_done_step(train_dir, os.environ.get("TFCTL_RUN_ID"))
        path = tf.train.latest_checkpoint(ckpt_dir) if os.path.isdir(ckpt_dir) else None
        if path is not None and path != last_path:
            try:
                step, params = restore(path)
            except (tf.errors.NotFoundError, tf.errors.DataLossError) as error:
                print(f"eval: {path} went away or is partial ({error.message}); retrying",
                      flush=True)
            else:
                loss, accuracy = evaluate(params, images, labels)
                if writer is None:  # created lazily: no eval/ dir before there is a score
                    writer = tf.summary.create_file_writer(os.path.join(train_dir, "eval"))
                digits.write_scalars(writer, step, {"loss": loss, "accuracy": accuracy})
                print(f"eval step {step} loss={loss:.4f} accuracy={accuracy:.4f}", flush=True)
                evaluated, last_path, last_step = evaluated + 1, path, step
        if done_step is not None and last_step >= done_step:
            print(f"eval finished: scored the final checkpoint (step {last_step})", flush=True)
            return 0
        if args.max_evals is not None and evaluated >= args.max_evals:
            print(f"eval finished: {evaluated} evaluations", flush=True)
            return 0
        if args.timeout_secs is not None and time.monotonic() - started > args.timeout_secs:
            print(f"eval timed out after {args.timeout_secs}s with {evaluated} evaluations",
                  flush=True)
            return 0 if evaluated else 1
        time.sleep(args.eval_interval_secs)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--train_dir", default="out", help="the trainer's --train_dir")
    parser.add_argument("--eval_interval_secs", type=float, default=2.0,
                        help="seconds between looks for a new checkpoint")
    parser.add_argument("--max_evals", type=int, default=None, help="stop after N evaluations")
    parser.add_argument("--timeout_secs", type=float, default=None,
                        help="give up after this long (status 1 if nothing was scored)")
    return parser.parse_args(argv)


if __name__ == "__main__":
    sys.exit(main())
