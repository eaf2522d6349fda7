"""The framework's start-up notices in a task's log, folded where the job is followed. Pure.

TensorFlow greets every process with lines that say nothing of the job: absl's
`WARNING: All log messages before absl::InitializeLog() ...`, the cpu_feature_guard's `This
TensorFlow binary is optimized ...` and its `To enable the following instructions ...`,
`oneDNN custom operations are on ...`, the CUDA plugins' `Unable to register cuDNN factory ...`,
TensorBoard's `NOTE: Using experimental fast data loading logic ...`. Four tasks print them
four times, before the first line of the job. The views that follow a run (`logs -f`, the
demo, the dashboard's log pane, the last line `up` and `status` show) fold them: the first
notice of a task becomes one line saying they were folded, the rest of them are left out, and
so are the blank lines a task prints before its first line of its own. `tfctl logs` without
`-f` (and `--json`) prints every line as written: the fold is a view, the logs are untouched.

A line that reads as an error (`failure.is_error_line`: an exception, a TensorFlow status word,
an OOM) is never folded, whatever it looks like.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from tfctl.remote.runs.failure import is_error_line

_TF_LOG = r"\.cc:\d+\] "
"""Where a line of TensorFlow's C++ logging says its source, before the message: absl's
`I0000 00:00:1795780454.396911   31135 cpu_feature_guard.cc:227] ` and the older
`2024-03-01 10:00:00.123456: E external/local_xla/xla/stream_executor/cuda/cuda_dnn.cc:9261] `."""

NOTICES = tuple(re.compile(p) for p in (
    r"^WARNING: All log messages before absl::InitializeLog\(\) is called are written to STDERR",
    _TF_LOG + r"This TensorFlow binary is optimized to use available CPU instructions",
    r"This TensorFlow binary is optimized with oneAPI Deep Neural Network Library",
    r"Your CPU supports instructions that this TensorFlow binary was not compiled to use",
    r"^To enable the following instructions: .*rebuild TensorFlow with the appropriate compiler "
    r"flags\.$",
    _TF_LOG + r"oneDNN custom operations are on\.",
    _TF_LOG + r"Unable to register cu(?:DNN|FFT|BLAS) factory: Attempting to register factory "
    r"for plugin cu\w+ when one has already been registered",
    _TF_LOG + r"computation placer already registered\.",
    _TF_LOG + r"TF-TRT Warning: Could not find TensorRT",
    _TF_LOG + r"successful NUMA node read from SysFS had negative value",
    r"^See more at https://github\.com/torvalds/linux/blob/v[\d.]+/Documentation/ABI/testing/"
    r"sysfs-bus-pci",
    _TF_LOG + r"XLA service 0x[0-9a-f]+ initialized for platform",
    r"^\s+StreamExecutor device \(\d+\): ",
    r"Compiled cluster using XLA!\s+This line is logged at most once",
    r"^NOTE: Using experimental fast data loading logic\. To disable, pass$",
    r'^\s+"--load_fast=false" and report issues on GitHub\. More details:$',
    r"^\s+https://github\.com/tensorflow/tensorboard/issues/4784$",
))
"""TensorFlow's (and TensorBoard's) known start-up notices, as TensorFlow 2.16 to 2.21 word them."""

FOLDED = "(TensorFlow's start-up notices folded: `tfctl logs` without -f shows every line)"
"""The one line a task's notices become."""


def is_notice(line: str) -> bool:
    """A known start-up notice, and no error."""
    return any(p.search(line) for p in NOTICES) and not is_error_line(line)


class NoticeFold:
    """The fold, over a run's lines as they come, task by task (each task's first notice is
    its one `FOLDED` line). No I/O: lines in, lines out."""

    def __init__(self) -> None:
        self._folded: set[str] = set()
        """Tasks whose FOLDED line was given."""
        self._spoke: set[str] = set()
        """Tasks that have printed a line of their own."""

    def lines(self, batch: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
        """`batch` ((task, line) pairs, in order) as the follow views show it."""
        shown: list[tuple[str, str]] = []
        for task, line in batch:
            if is_notice(line):
                if task not in self._folded:
                    self._folded.add(task)
                    shown.append((task, FOLDED))
                continue
            if not line.strip() and task not in self._spoke:
                continue  # the blank lines around a notice, before the task's first line
            self._spoke.add(task)
            shown.append((task, line))
        return shown


def last_said(lines: Sequence[str]) -> str:
    """The last line that is not a notice (the last line when all of them are)."""
    return next((line for line in reversed(lines) if not is_notice(line)),
                lines[-1] if lines else "")
