"""inventory/frameworks/tensorflow/host.judge_tensorflow: what TensorFlow said on a host, against
the inventory."""

from __future__ import annotations

from typing import Any

import pytest

from tfctl.inventory.frameworks.tensorflow.host import judge_tensorflow

CPU = {"importable": True, "version": "2.21.0", "distribution": "tensorflow-cpu", "gpus": [],
       "built_with_cuda": False, "tf_keras": None}
GPU = dict(CPU, distribution="tensorflow", built_with_cuda=True,
           gpus=["/physical_device:GPU:0", "/physical_device:GPU:1"])


@pytest.mark.parametrize(("tf", "wanted", "keras", "fails"), [
    (CPU, (), "default", []),
    (CPU, (0, 1), "default", ["tensorflow-cpu cannot use the 2 GPU(s)"]),
    (dict(GPU, gpus=[]), (0,), "default", ["TensorFlow sees 0 GPU(s) but the inventory selects 1"]),
    (GPU, (0, 1), "default", []),
    (GPU, (0, 1), "legacy", ["`job.keras: legacy` needs the tf_keras package"]),
    (dict(GPU, tf_keras="2.21.0"), (0,), "legacy", []),
    ({"importable": False, "error": "ImportError: libcudart.so.12"}, (0,), "default",
     ["`import tensorflow` fails there: ImportError: libcudart.so.12"]),
])
def test_findings(tf: dict[str, Any], wanted: tuple[int, ...], keras: str,
                  fails: list[str]) -> None:
    found = judge_tensorflow(tf, wanted, keras)
    failed = [text for level, text in found if level == "fail"]
    assert len(failed) == len(fails) and all(f in t for f, t in zip(fails, failed, strict=True))
    if tf.get("importable"):
        assert found[0][1].startswith(f"TensorFlow {tf['version']} ({tf['distribution']}) sees")


def test_nothing_when_tensorflow_was_not_asked() -> None:
    assert judge_tensorflow(None, (0,), "legacy") == []
