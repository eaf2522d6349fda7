"""TensorFlow's start-up notices folded in the follow views (remote/runs/notices.py): which lines
are notices, the fold task by task, never an error line, and the last line a task said."""

from __future__ import annotations

import pytest

from tfctl.remote.runs.notices import FOLDED, NoticeFold, is_notice, last_said

ABSL = "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR"
CPU_GUARD = ("I0000 00:00:1795780454.396911   31135 cpu_feature_guard.cc:227] This TensorFlow "
             "binary is optimized to use available CPU instructions in performance-critical "
             "operations.")
CPU_FLAGS = ("To enable the following instructions: AVX2 FMA, in other operations, rebuild "
             "TensorFlow with the appropriate compiler flags.")
ONEDNN = ("I0000 00:00:1721146826.106773   12345 port.cc:153] oneDNN custom operations are on. "
          "You may see slightly different numerical results due to floating-point round-off "
          "errors from different computation orders. To turn them off, set the environment "
          "variable `TF_ENABLE_ONEDNN_OPTS=0`.")
CUDNN = ("2024-03-01 10:00:00.123456: E external/local_xla/xla/stream_executor/cuda/cuda_dnn.cc"
         ":9261] Unable to register cuDNN factory: Attempting to register factory for plugin "
         "cuDNN when one has already been registered")
TENSORBOARD = ("NOTE: Using experimental fast data loading logic. To disable, pass",
               '    "--load_fast=false" and report issues on GitHub. More details:',
               "    https://github.com/tensorflow/tensorboard/issues/4784")


@pytest.mark.parametrize(("line", "notice"), [
    (ABSL, True),
    (CPU_GUARD, True),
    (CPU_FLAGS, True),
    (ONEDNN, True),
    (CUDNN, True),
    (TENSORBOARD[0], True),
    (TENSORBOARD[1], True),
    (TENSORBOARD[2], True),
    ("I0000 00:00:1721146826.5   12345 gpu_device.cc:2022] Created device /job:localhost/"
     "replica:0/task:0/device:GPU:0 with 79078 MB memory", False),  # which GPU: the job's
    ("step 10 loss=2.2203 accuracy=0.2031 steps_per_sec=9.2", False),
    ("", False),
    (ONEDNN + " OOM when allocating tensor", False),  # reads as an error: never folded
    (CUDNN.replace("Unable", "RESOURCE_EXHAUSTED: Unable"), False),
])
def test_notices(line: str, notice: bool) -> None:
    assert is_notice(line) is notice


def test_each_tasks_notices_become_one_line_and_its_own_lines_all_stay() -> None:
    fold = NoticeFold()
    first = fold.lines([("ps:0", ABSL), ("worker:0", ABSL), ("ps:0", CPU_GUARD),
                        ("ps:0", CPU_FLAGS), ("worker:0", CPU_GUARD), ("ps:0", "ps:0 serving")])
    assert first == [("ps:0", FOLDED), ("worker:0", FOLDED), ("ps:0", "ps:0 serving")]
    later = fold.lines([("worker:0", ONEDNN), ("worker:0", "step 1"), ("ps:0", CUDNN),
                        ("worker:0", ""), ("worker:1", CUDNN), ("worker:1", "step 1")])
    assert later == [("worker:0", "step 1"), ("worker:0", ""), ("worker:1", FOLDED),
                     ("worker:1", "step 1")]


def test_tensorboards_note_and_the_blank_lines_around_it_fold_into_one() -> None:
    told = NoticeFold().lines([("tensorboard:0", line) for line in (
        "", *TENSORBOARD, "", "TensorBoard 2.21.0 at http://127.0.0.1:6006/ (Press CTRL+C to "
        "quit)")])
    assert [line for _, line in told] == [
        FOLDED, "TensorBoard 2.21.0 at http://127.0.0.1:6006/ (Press CTRL+C to quit)"]


def test_an_error_among_the_notices_is_shown() -> None:
    error = "tensorflow.python.framework.errors_impl.UnavailableError: UNAVAILABLE: connect"
    assert NoticeFold().lines([("worker:0", ABSL), ("worker:0", error)]) == [
        ("worker:0", FOLDED), ("worker:0", error)]


@pytest.mark.parametrize(("lines", "said"), [
    ((), ""),
    (("step 3", ONEDNN), "step 3"),
    ((ABSL, CPU_GUARD), CPU_GUARD),  # nothing but notices: the last line, as it is
    (("serving",), "serving"),
])
def test_the_last_line_a_task_said(lines: tuple[str, ...], said: str) -> None:
    assert last_said(lines) == said
