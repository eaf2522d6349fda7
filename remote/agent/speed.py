"""Training speed in a log line: one reader for the run recorder on the hosts (`throughput.csv`),
the dashboard's steps/s column and `tfctl status`.

The forms it knows by default (`job.throughput: [REGEX…]` replaces them; each regex's first group
is the number):
- the bundled trainer's `steps_per_sec=41.2` (and `steps_per_second: 41.2`);
- TF1 hooks' `global_step/sec: 149.1` (absl's and tf.logging's form) or `global_step/sec 149.1`;
- the TF1 CIFAR-10 tutorial's `(2580.3 examples/sec; 0.050 sec/batch)`: its step time gives
  steps/s (20), and `examples/sec` alone gives examples/s;
- Keras' progress bar, `… 12ms/step` (also `345us/step` and `2s/step`), turned into steps/s;
- `12.5 steps/s`.
A line of a progress bar redrawn in place (`\\r`) is read from its last drawing.

Part of the agent program (`__init__.py`): stdlib only, Python >= 3.8; every top-level name is
unique among the agent files, which are joined into one module on the hosts.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

_SPEED_NUMBER = r"([0-9]+(?:\.[0-9]+)?)"
STEPS_PER_S, EXAMPLES_PER_S = "steps/s", "examples/s"

# (regex, seconds a unit of the number is worth when it is a time per step, else None, unit).
DEFAULT_SPEED_FORMS: tuple[tuple[str, float | None, str], ...] = (
    (r"steps_per_sec(?:ond)?\s*[=:]\s*" + _SPEED_NUMBER, None, STEPS_PER_S),
    (r"global_step/sec\s*[=:]?\s*" + _SPEED_NUMBER, None, STEPS_PER_S),
    (_SPEED_NUMBER + r"\s*sec/batch\b", 1.0, STEPS_PER_S),
    (_SPEED_NUMBER + r"\s*examples/sec\b", None, EXAMPLES_PER_S),
    (r"\b" + _SPEED_NUMBER + r"ms/step\b", 1e-3, STEPS_PER_S),
    (r"\b" + _SPEED_NUMBER + r"us/step\b", 1e-6, STEPS_PER_S),
    (r"\b" + _SPEED_NUMBER + r"s/step\b", 1.0, STEPS_PER_S),
    (_SPEED_NUMBER + r"\s*steps?/s(?:ec)?\b", None, STEPS_PER_S),
)
DEFAULT_THROUGHPUT_PATTERNS: tuple[str, ...] = tuple(form[0] for form in DEFAULT_SPEED_FORMS)


def speed_form(pattern: str) -> tuple[float | None, str]:
    """How a user's `job.throughput` regex reads: its number is a time per step where the regex
    names `ms/step`, examples per second where it names `examples`, else steps per second."""
    if "ms/step" in pattern:
        return 1e-3, STEPS_PER_S
    if "sec/batch" in pattern or "s/step" in pattern:
        return 1.0, STEPS_PER_S
    return None, EXAMPLES_PER_S if "examples" in pattern else STEPS_PER_S


class SpeedReader:
    """`value(line)` → (speed, unit) for the first form that matches, or None. With `patterns`
    (the job's `throughput:`), only those; without, the default forms."""

    def __init__(self, patterns: Sequence[str] = ()) -> None:
        self.forms: list[tuple[re.Pattern[str], float | None, str]] = (
            [(re.compile(p), *speed_form(p)) for p in patterns] if patterns
            else [(re.compile(p), per, unit) for p, per, unit in DEFAULT_SPEED_FORMS])

    def value(self, line: str) -> tuple[float, str] | None:
        for drawing in reversed(line.split("\r")):
            if drawing.strip():
                return self._read(drawing)
        return None

    def _read(self, text: str) -> tuple[float, str] | None:
        for pattern, seconds_per_unit, unit in self.forms:
            match = pattern.search(text)
            if match is None:
                continue
            try:
                number = float(match.group(1))
            except (IndexError, ValueError):
                continue
            if seconds_per_unit is None:
                return number, unit
            if number > 0:  # a time per step: 0 says nothing about the speed
                return 1.0 / (number * seconds_per_unit), unit
        return None
