"""TensorFlow on a host: what `tfctl check` makes of its answer, and its known failures in logs.

Pure. The host's answer comes from the agent's probe (remote/agent/hostops.py `op_probe`: which
TensorFlow distribution is installed, `tf_version`; remote/agent/tfprobe.py: what TensorFlow
says of itself, `tensorflow`); remote/runs/check.py asks it and prints these findings. The hints
name the fix for the failures labs hit most (docs/field-notes.md §2); remote/runs/failure.py
picks the first that matches a failed task's log.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from tfctl.inventory.frameworks.interface import Hint, Level, not_installed_hint


def judge_install(probe: Mapping[str, Any]) -> list[tuple[Level, str]]:
    """The TensorFlow distribution the host's python has, or the fix where it has none."""
    version = probe.get("tf_version")
    if version:
        return [("ok", f"TensorFlow {version}")]
    return [("fail", f"TensorFlow is not installed for {probe.get('executable')}: install it "
                     "there (pip install tensorflow) or point `python:` at an interpreter that "
                     "has it")]


def judge_tensorflow(tf: Mapping[str, Any] | None, wanted: tuple[int, ...],
                     keras: str) -> list[tuple[Level, str]]:
    """What TensorFlow itself said on the host (`agent/tfprobe.py`), against the inventory."""
    if tf is None:
        return []
    if not tf.get("importable"):
        return [("fail", f"`import tensorflow` fails there: {tf.get('error')}")]
    gpus = list(tf.get("gpus") or [])
    found: list[tuple[Level, str]] = [("ok", f"TensorFlow {tf.get('version')} "
                                             f"({tf.get('distribution')}) sees {len(gpus)} GPU(s)")]
    if wanted and tf.get("distribution") == "tensorflow-cpu":
        found.append(("fail", f"tensorflow-cpu cannot use the {len(wanted)} GPU(s) the inventory "
                              "selects: install `tensorflow[and-cuda]` there instead"))
    elif wanted and len(gpus) < len(wanted):
        found.append(("fail", f"TensorFlow sees {len(gpus)} GPU(s) but the inventory selects "
                              f"{len(wanted)} (built with CUDA: "
                              f"{'yes' if tf.get('built_with_cuda') else 'no'}): check the "
                              "driver and CUDA libraries TensorFlow needs"))
    if keras == "legacy" and not tf.get("tf_keras"):
        found.append(("fail", "`job.keras: legacy` needs the tf_keras package: "
                              "`pip install --no-deps tf-keras` there"))
    return found


# Keras 2 code under Keras 3 (tf.keras since TensorFlow 2.16), each as Keras 3 words it with
# TensorFlow 2.21: metrics' `reset_states` and the optimizers' `get_updates` are gone; the
# `experimental` modules are gone; `optimizers.legacy` raises (keras/src/optimizers/__init__.py,
# LegacyOptimizerWarning); a directory given to `model.save` is refused (keras/src/saving/
# saving_api.py); `model.fit` under MultiWorkerMirroredStrategy feeds a PerReplica value to a
# tensor conversion (keras-team/keras#20585).
KERAS_2_UNDER_3 = re.compile(
    r"object has no attribute '(?:reset_states|get_updates)'"
    r"|module 'keras\.\w+' has no attribute 'experimental'"
    r"|`keras\.optimizers\.legacy` is not supported in Keras 3"
    r"|Invalid filepath extension for saving\. Please add either a `\.keras` extension"
    r"|with an unsupported type \(<class '[\w.]*\bPerReplica'>\) to a Tensor")

HINTS = (
    Hint(KERAS_2_UNDER_3,
         "Keras 2 code under Keras 3 (tf.keras is Keras 3 since TensorFlow 2.16): set "
         "`job.keras: legacy` (every task gets TF_USE_LEGACY_KERAS=1, so tf.keras is Keras 2) "
         "and install tf_keras on the hosts in `job.setup`, e.g. `pip install --no-deps "
         "tf-keras~=2.NN` with TensorFlow's own 2.NN (`tfctl check` says where it is missing)"),
    Hint(re.compile(r"_temp\b.*No such file or directory|MergeV2Checkpoints|"
                    r"part-\d+-of-\d+.*not found", re.IGNORECASE),
         "each parameter server writes its checkpoint shard on its own host: use a checkpoint "
         "directory that every ps and the chief see (hosts marked `shared_fs: true`), or save "
         "unsharded from the chief"),
    Hint(re.compile(r"Mismatched number of GPUs|same number of devices", re.IGNORECASE),
         "every worker must have the same number of GPUs under this strategy: `tfctl plan` "
         "shows the masks (use `workers: per_gpu`, or the same GPUs on every host)"),
    Hint(re.compile(r"RESOURCE_EXHAUSTED|OOM when allocating|out of memory", re.IGNORECASE),
         "out of GPU memory: lower the batch size (per host: `hosts[].args`), or give the task "
         "a GPU no other process uses (`tfctl gpus`)"),
    Hint(re.compile(r"DNS resolution failed|C-ares status is not ARES_SUCCESS"),
         "a task could not resolve a host name of the cluster spec (no firewall is to blame): "
         "every name `tfctl plan` shows must resolve on the hosts; give that host "
         "`cluster_address:` (the IP the others reach it by); `tfctl check` tries every name "
         "from every host"),
    Hint(re.compile(r"UNAVAILABLE|failed to connect to all addresses|Connection refused",
                    re.IGNORECASE),
         "a task could not reach another: are the ports open between the hosts? "
         "(`tfctl check --firewall` prints rules that open them)"),
    not_installed_hint("tensorflow", "TensorFlow"),
)
"""TensorFlow's known failures, the first match wins."""
