"""The agent's wire: its line markers, its version, the failure an answer carries
(`AgentError`), how a line is read and written (`json_loads`, `json_dumps`), and the modules the
agent program imports on first use (`LaterModule`); shared by the agent (host) and agentclient
(here).

Its own file, first in the agent program, so that the client can read them without importing the
agent's modules (~15 ms of every command's start).

A request line is read and an answer written with CPython's own JSON accelerator (`_json`, what
the `json` module calls for the same work), because importing `json` imports `re` and its
`enum`, which cost an agent start more than all its own code: ~30 M instructions of a start of
~60 M (benchmarks/agent_start.py). Where `_json` is missing (another Python), `json` does it.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

try:
    import _json
except ImportError:  # not CPython: the json module (which needs no accelerator)
    _json = None  # type: ignore[assignment]

ANSWER_MARK = "\x1etfctl-answer "
"""Starts the line that carries an answer: nothing else a child prints is taken for one."""
ACK_LINE = "\x1etfctl-ack\n"
"""Sent as soon as a request line arrives: a silent idle session means a dead link."""
WIRE_VERSION = 1
"""The vocabulary's version (vocab.py): sent in every request (`v`) and every answer; a change
of a record that an older reader would misread takes the next number."""


class AgentError(Exception):
    """A failure with a one-sentence message for a person and a `kind` for the client: the
    operation's answer is `{"ok": false, "kind": kind, "error": message, **extra}`
    (`optable.main`), which the client raises as the error its kind names (remote/errors.py)."""

    def __init__(self, kind: str, message: str, **extra: Any) -> None:
        super().__init__(message)
        self.kind, self.message, self.extra = kind, message, extra


class _Scanning:
    """What `_json.make_scanner` reads of its decoder: `json.JSONDecoder()`'s defaults."""

    strict = True
    object_hook = None
    object_pairs_hook = None
    parse_float = float
    parse_int = int
    parse_constant = {"-Infinity": float("-inf"), "Infinity": float("inf"),
                      "NaN": float("nan")}.__getitem__


_scan = None if _json is None else _json.make_scanner(_Scanning())  # type: ignore[arg-type]


def json_loads(text: str) -> Any:
    """The JSON value of `text` (whitespace around it allowed), as `json.loads` reads it."""
    if _scan is None:
        import json

        return json.loads(text)
    text = text.strip(" \t\n\r")
    try:
        value, end = _scan(text, 0)
    except StopIteration as stop:
        raise _decode_error("Expecting value", text, stop.value) from None
    if end != len(text):
        raise _decode_error("Extra data", text, end)
    return value


def _decode_error(what: str, text: str, at: int) -> ValueError:
    """json.JSONDecodeError, as `json.loads` raises it (json is imported for a failure only)."""
    from json import JSONDecodeError

    return JSONDecodeError(what, text, at)


def json_dumps(value: Any, *, sort_keys: bool = False,
               default: Callable[[Any], Any] | None = None) -> str:
    """`value` as JSON, as `json.dumps(value, sort_keys=..., default=...)` writes it (one line,
    ASCII; a value JSON has no form for raises TypeError unless `default` turns it into one)."""
    if _json is None:
        import json

        return json.dumps(value, sort_keys=sort_keys, default=default)
    encode = _json.make_encoder({}, default or _unwritable, _json.encode_basestring_ascii, None,
                                ": ", ", ", sort_keys, False, True)
    return "".join(encode(value, 0))


def _unwritable(value: Any) -> Any:
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def which(name: str) -> str | None:
    """Where the command `name` is on the PATH, as `shutil.which(name)` finds it, without
    importing shutil (which imports re, bz2 and lzma: ~40 M instructions of an agent's run)."""
    seen = set()
    for folder in os.environ.get("PATH", os.defpath).split(os.pathsep):
        if folder in seen:
            continue
        seen.add(folder)
        path = os.path.join(folder, name)
        if os.path.exists(path) and os.access(path, os.X_OK) and not os.path.isdir(path):
            return path
    return None


class LaterModule:
    """A module of the standard library that the agent program imports when it is first used.

    On a host, the agent files' top-level `import json` (and the other `program.DEFERRED`
    modules) are cut and their names bound to one of these: the first attribute read imports
    the module and binds its name in the program's globals to it, so every later use is the
    module itself. An agent start thus imports only what its requests use (`json` and `re`,
    `signal` and `enum`, `contextlib` and `functools` cost ~60 M instructions together)."""

    def __init__(self, name: str, namespace: dict[str, Any]) -> None:
        self._name, self._namespace = name, namespace

    def __getattr__(self, attr: str) -> Any:
        module = __import__(self._name)
        self._namespace[self._name] = module
        return getattr(module, attr)
