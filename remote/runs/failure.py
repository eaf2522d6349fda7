"""What a task died of, in its own words: the error lines of a log tail, and one hint.

Pure (no I/O). A Python traceback ends with the exception, but TensorFlow's errors come wrapped:
the status line (`NOT_FOUND: …`, `UNAVAILABLE: …`) may sit above five stack-frame lines, and a
tail of the last N lines then shows only frames (`File ".../saver.py", line 946, in build`).
So the lines shown for a failed task are picked: exception and status lines first, frames last.
The hints name the fix for the failures labs hit most (docs/field-notes.md §2); each
framework keeps its own (TensorFlow's: inventory/frameworks/tensorflow/host.py).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from tfctl.inventory.frameworks import known_hints

# `ValueError: …`, `tensorflow.python.framework.errors_impl.NotFoundError: …`, `Killed`.
_EXCEPTION = re.compile(r"^\s*(?:[\w.]+\.)?\w*(?:Error|Exception|Exit|Interrupt)\b(?::|$)")
_TF_STATUS = re.compile(
    r"\b(?:NOT_FOUND|UNAVAILABLE|RESOURCE_EXHAUSTED|INVALID_ARGUMENT|FAILED_PRECONDITION|"
    r"ABORTED|DEADLINE_EXCEEDED|INTERNAL|CANCELLED|PERMISSION_DENIED|OUT_OF_RANGE|DATA_LOSS|"
    r"UNIMPLEMENTED)\b")
_OTHER = re.compile(r"\bOOM when allocating|\bout of memory\b|^Killed$|Segmentation fault|"
                    r"Check failed:|^Aborted", re.IGNORECASE)
_FRAME = re.compile(r'^\s*File "[^"]*", line \d+')
_TRACEBACK_HEAD = "Traceback (most recent call last):"
# TensorFlow's graph errors list the failed node's definition before the cause
# (tensorflow/python/framework/error_interpolation.py, `interpolate_graph`).
_NODE_FRAMES = re.compile(r"^\s*Detected at node\b")


HINTS = known_hints()
"""The known failures of every framework (`Framework.hints`), the first match wins."""


@dataclass(frozen=True)
class Failure:
    """The telling lines of a failed task's log, and a hint when the failure is a known one."""

    lines: tuple[str, ...]
    hint: str | None
    headline: str | None = None
    """What names the error: the last Python exception line (with the line after it when the
    message goes on there, as TensorFlow's do), else the last status or error line."""


def is_error_line(line: str) -> bool:
    return bool(_EXCEPTION.search(line) or _TF_STATUS.search(line) or _OTHER.search(line))


def explain(tail: Sequence[str], keep: int = 5, framework: str | None = None) -> Failure:
    """The `keep` most telling lines of `tail`, in log order, and the hint for the failure
    (the hints of `framework`, the job's, first: `known_hints`).

    Error lines win over everything; then plain lines (what the program printed); stack frames
    and the code lines under them only when nothing else is left.
    """
    lines = [line.rstrip("\n") for line in tail]
    ranked = sorted(range(len(lines)), key=lambda i: (_rank(lines, i), -i))
    chosen = set(ranked[:keep])
    head = _headline_index(lines)
    more = _continuation_index(lines, head) if head is not None else None
    if more is not None:
        chosen.add(more)  # where the exception's message goes on
    text = "\n".join(lines)
    hints = HINTS if framework is None else known_hints(framework)
    hint = next((h.advice for h in hints if h.pattern.search(text)), None)
    headline = None
    if head is not None:
        headline = lines[head].strip()
        if more is not None:
            headline += " " + lines[more].strip()
    return Failure(tuple(lines[i] for i in sorted(chosen)), hint, headline)


def _continuation_index(lines: Sequence[str], head: int) -> int | None:
    """Where an exception line ending in `:` goes on: the next line, as in `NotFoundError: From
    /job:ps/task:1:`; or, for TensorFlow's `Graph execution error:` (a blank line, the node's
    definition frames, then the cause at the end), the first status or known failure below."""
    if not lines[head].rstrip().endswith(":") or head + 1 >= len(lines):
        return None
    below = range(head + 1, len(lines))
    if lines[head + 1].strip() and not _NODE_FRAMES.match(lines[head + 1]):
        return head + 1
    causes = [i for i in below if is_error_line(lines[i]) and not _CONSEQUENCE.search(lines[i])]
    known = [i for i in causes if any(h.pattern.search(lines[i]) for h in HINTS)]
    plain = [i for i in below if lines[i].strip()]
    return next(iter(known or causes or plain), None)


# What other tasks say once one has failed: a consequence, never the cause.
_CONSEQUENCE = re.compile(r"\b(?:ABORTED|CANCELLED)\b|[Cc]ancelled")


def _headline_index(lines: Sequence[str]) -> int | None:
    """The Python exception if the tail has one; else a known failure's line; else the last
    status line that is not a mere consequence (ABORTED, CANCELLED); else any error line."""
    groups = (
        [i for i, line in enumerate(lines) if _EXCEPTION.search(line)],
        [i for i, line in enumerate(lines)
         if is_error_line(line) and any(h.pattern.search(line) for h in HINTS)],
        [i for i, line in enumerate(lines)
         if is_error_line(line) and not _CONSEQUENCE.search(line)],
        [i for i, line in enumerate(lines) if is_error_line(line)],
    )
    best = next((group for group in groups if group), [])
    return best[-1] if best else None


def _rank(lines: Sequence[str], i: int) -> int:
    line = lines[i]
    if _EXCEPTION.search(line):
        return 0  # a Python exception: what the program died of
    if is_error_line(line):
        return 1  # a status word in a log line, OOM, Killed
    if not line.strip() or line.strip() == _TRACEBACK_HEAD:
        return 4
    if _FRAME.match(line) or (i > 0 and _FRAME.match(lines[i - 1])):
        return 3  # a frame, or the source line Python prints under it
    return 2
