"""The lab's policy: the rules a host's administrator writes for every user's tfctl.

docs/policy.md says it for people.

Part of the agent program (`__init__.py`): stdlib only, Python >= 3.8, Linux, no tfctl imports.

The file is `$TFCTL_LAB_POLICY` where the host's environment sets it (sshd's, never the
inventory's: the inventory's `env` reaches the tasks, not the agent), else `/etc/tfctl/lab.yaml`.
Its format is YAML, read by a small strict parser of the subset a policy needs (no PyYAML on the
hosts): block mappings, scalars, flow lists (`[sessions, runs]`), flow mappings
(`{below_util_pct: 5, warn_after: 1h}`), block lists of scalars and `#` comments. Anything else
(anchors, tags, multi-line strings, tabs, a key twice) is refused with its line.

The file is trusted only as the administrator's: read like a claim (docs/claims.md: a link never
followed, only a regular file of at most MAX_POLICY_BYTES), owned by root or by the claims
folder's owner, and writable by no one else. A file that fails any of this is ignored, and why
(one sentence naming the file, the line where there is one, and the reason) is in the reading.
No file: no policy, and tfctl behaves as it would without one.
"""

from __future__ import annotations

import os
import re
import stat
from typing import Any

from tfctl.remote.agent.claims import claims_dir
from tfctl.remote.agent.proc import user_name

POLICY_VAR = "TFCTL_LAB_POLICY"
DEFAULT_POLICY = "/etc/tfctl/lab.yaml"
MAX_POLICY_BYTES = 16 * 1024
APPLIES_TO = ("sessions", "runs")
IDLE_KEYS = ("below_util_pct", "warn_after", "stop_after", "applies_to")


class PolicyError(ValueError):
    """What is wrong with a policy's text: the line (1-based; 0 when none) and why."""

    def __init__(self, line: int, why: str) -> None:
        super().__init__(why)
        self.line, self.why = line, why


# ---------------------------------------------------------------- durations

_DURATION = r"^(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?$"


def parse_duration(text: str) -> float:
    """`5s`, `15s`, `1h`, `3h`, `1h30m`, `2d` as seconds (ValueError otherwise); pure."""
    found = re.match(_DURATION, text.strip())
    if not text.strip() or found is None or not any(found.groups()):
        raise ValueError(f"{text!r} is not a duration (write e.g. 45s, 30m, 1h30m, 2d)")
    days, hours, minutes, seconds = (int(g or 0) for g in found.groups())
    return float(((days * 24 + hours) * 60 + minutes) * 60 + seconds)


def duration_words(seconds: float) -> str:
    """3600 → `1h`, 5400 → `1h30m`, 15 → `15s`: as a policy writes it; pure."""
    left, out = round(seconds), ""
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if left >= size:
            out += f"{left // size}{unit}"
            left %= size
    return out or "0s"


# ---------------------------------------------------------------- the YAML subset

def _strip_comment(line: str) -> str:
    """The line less a `#` comment (one at the start, or after a space, outside quotes)."""
    quote = None
    for i, ch in enumerate(line):
        if quote:
            if ch == quote:
                quote = None
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or line[i - 1] in " \t"):
            return line[:i].rstrip()
    return line.rstrip()


def _scalar(text: str, line: int) -> Any:
    """A plain or quoted scalar: int, float, true/false, null, or a string."""
    text = text.strip()
    if not text:
        return None
    if text[0] in "'\"":
        if len(text) < 2 or text[-1] != text[0]:
            raise PolicyError(line, f"unterminated quoted string {text}")
        return text[1:-1]
    if text[0] in "&*!|>%@`":
        raise PolicyError(line, f"{text[0]!r} (anchors, aliases, tags, block strings) is not "
                                "part of the policy's YAML")
    lowered = text.lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    if lowered in ("null", "~"):
        return None
    if re.match(r"^[-+]?\d+$", text):
        return int(text)
    if re.match(r"^[-+]?(\d+\.\d*|\.\d+|\d+)([eE][-+]?\d+)?$", text):
        return float(text)
    return text


class _Flow:
    """A flow collection (`[a, b]`, `{k: v}`, nested) read from one text."""

    def __init__(self, text: str, line: int) -> None:
        self.text, self.pos, self.line = text, 0, line

    def value(self) -> Any:
        self._space()
        if self._peek() == "[":
            return self._list()
        if self._peek() == "{":
            return self._map()
        return _scalar(self._plain(), self.line)

    def _peek(self) -> str:
        return self.text[self.pos] if self.pos < len(self.text) else ""

    def _space(self) -> None:
        while self._peek() in (" ", "\t") and self._peek():
            self.pos += 1

    def _plain(self) -> str:
        start = self.pos
        if self._peek() in "'\"":
            end = self.text.find(self._peek(), self.pos + 1)
            if end < 0:
                raise PolicyError(self.line, "unterminated quoted string")
            self.pos = end + 1
            return self.text[start:self.pos]
        while self._peek() and self._peek() not in ",]}":
            if self._peek() == ":" and self.text[self.pos + 1:self.pos + 2] in (" ", ""):
                break
            self.pos += 1
        return self.text[start:self.pos].strip()

    def _expect(self, ch: str) -> None:
        self._space()
        if self._peek() != ch:
            got = self._peek() or "the end of the value"
            raise PolicyError(self.line, f"expected {ch!r} in a flow collection, found {got!r}")
        self.pos += 1

    def _list(self) -> list[Any]:
        self._expect("[")
        out: list[Any] = []
        self._space()
        if self._peek() == "]":
            self.pos += 1
            return out
        while True:
            out.append(self.value())
            self._space()
            if self._peek() == ",":
                self.pos += 1
                continue
            self._expect("]")
            return out

    def _map(self) -> dict[str, Any]:
        self._expect("{")
        out: dict[str, Any] = {}
        self._space()
        if self._peek() == "}":
            self.pos += 1
            return out
        while True:
            self._space()
            key = _scalar(self._plain(), self.line)
            if not isinstance(key, str) or not key:
                raise PolicyError(self.line, f"a flow mapping's key must be a name, not {key!r}")
            self._expect(":")
            if key in out:
                raise PolicyError(self.line, f"key {key} is given twice")
            out[key] = self.value()
            self._space()
            if self._peek() == ",":
                self.pos += 1
                continue
            self._expect("}")
            return out

    def end(self) -> None:
        self._space()
        if self.pos < len(self.text):
            raise PolicyError(self.line, f"unexpected {self.text[self.pos:]!r} after the value")


def _flow_value(text: str, line: int) -> Any:
    flow = _Flow(text, line)
    value = flow.value()
    flow.end()
    return value


def _balanced(text: str) -> bool:
    depth, quote = 0, None
    for ch in text:
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch in "[{":
            depth += 1
        elif ch in "]}":
            depth -= 1
    return depth <= 0


def parse_yaml(text: str) -> tuple[dict[str, Any], dict[tuple[str, ...], int]]:
    """The mapping a policy's text holds, and the line of each key (by its path); PolicyError
    for anything outside the subset; pure."""
    rows: list[tuple[int, int, str]] = []  # (line, indent, content)
    pending: tuple[int, int, str] | None = None
    for number, raw in enumerate(text.splitlines(), 1):
        if "\t" in raw[:len(raw) - len(raw.lstrip())]:
            raise PolicyError(number, "a tab in the indentation (indent with spaces)")
        content = _strip_comment(raw)
        if pending is not None:  # a flow collection continued over lines
            pending = (pending[0], pending[1], pending[2] + " " + content.strip())
            if _balanced(pending[2]):
                rows.append(pending)
                pending = None
            continue
        if not content.strip() or (content.strip() == "---" and not rows):
            continue
        if content.strip() in ("---", "..."):
            raise PolicyError(number, "one document only (no --- or ... inside it)")
        row = (number, len(content) - len(content.lstrip()), content.strip())
        if _balanced(row[2]):
            rows.append(row)
        else:
            pending = row
    if pending is not None:
        raise PolicyError(pending[0], "a [ or { that is never closed")
    lines: dict[tuple[str, ...], int] = {}
    value, rest = _block(rows, 0, 0, (), lines)
    if rest < len(rows):
        raise PolicyError(rows[rest][0], "unexpected indentation")
    if value is None:
        return {}, lines
    if not isinstance(value, dict):
        raise PolicyError(rows[0][0], "the policy must be a mapping of keys (idle: ...)")
    return value, lines


def _block(rows: list[tuple[int, int, str]], at: int, indent: int, path: tuple[str, ...],
           lines: dict[tuple[str, ...], int]) -> tuple[Any, int]:
    """The block (mapping or list) starting at rows[at] with exactly `indent`; (value, next)."""
    if at >= len(rows):
        return None, at
    if rows[at][1] != indent:
        raise PolicyError(rows[at][0], "unexpected indentation")
    if rows[at][2].startswith("- ") or rows[at][2] == "-":
        items: list[Any] = []
        while at < len(rows) and rows[at][1] == indent:
            number, _, content = rows[at]
            if not (content.startswith("- ") or content == "-"):
                raise PolicyError(number, "a list item (- ...) expected")
            item = content[1:].strip()
            if not item or re.match(r"^[^\[{'\"]*:( |$)", item):
                raise PolicyError(number, "a list's items must be scalars or flow values")
            items.append(_flow_value(item, number))
            at += 1
        return items, at
    out: dict[str, Any] = {}
    while at < len(rows) and rows[at][1] == indent:
        number, _, content = rows[at]
        found = re.match(r"^([A-Za-z_][A-Za-z0-9_.-]*|'[^']*'|\"[^\"]*\")\s*:(?:\s+(.*))?$",
                         content)
        if found is None:
            raise PolicyError(number, f"expected `key: value`, found {content!r}")
        key = found.group(1).strip("'\"")
        if key in out:
            raise PolicyError(number, f"key {key} is given twice")
        where = (*path, key)
        lines[where] = number
        at += 1
        text = (found.group(2) or "").strip()
        if text:
            value = _flow_value(text, number)
            if isinstance(value, dict):
                for inner in value:
                    inner_path = (*where, inner)
                    lines[inner_path] = number
        elif at < len(rows) and rows[at][1] > indent:
            value, at = _block(rows, at, rows[at][1], where, lines)
        else:
            value = None
        out[key] = value
    if at < len(rows) and rows[at][1] > indent:
        raise PolicyError(rows[at][0], "unexpected indentation")
    return out, at


# ---------------------------------------------------------------- the policy's keys

def parse_policy(text: str) -> dict[str, Any]:
    """The policy a file's text says, checked: `{"idle": {below_util_pct, warn_after_s,
    stop_after_s, applies_to}}` (no `idle` key: no idle rule); PolicyError otherwise; pure."""
    data, lines = parse_yaml(text)
    policy: dict[str, Any] = {}
    for key in data:
        if key != "idle":
            raise PolicyError(lines.get((key,), 0), f"unknown key {key} (the policy knows: idle)")
    idle = data.get("idle")
    if "idle" in data:
        policy["idle"] = _idle_rule(idle, lines)
    return policy


def _idle_rule(idle: Any, lines: dict[tuple[str, ...], int]) -> dict[str, Any]:
    at = lines.get(("idle",), 0)
    if not isinstance(idle, dict):
        raise PolicyError(at, "idle must be a mapping: {below_util_pct: 5, warn_after: 1h, "
                              "stop_after: 3h, applies_to: [sessions]}")

    def line(key: str) -> int:
        return lines.get(("idle", key), at)

    for key in idle:
        if key not in IDLE_KEYS:
            raise PolicyError(line(key), f"unknown key idle.{key} (idle knows: "
                                         f"{', '.join(IDLE_KEYS)})")
    for key in ("below_util_pct", "warn_after", "stop_after"):
        if key not in idle:
            raise PolicyError(at, f"idle.{key} is missing")
    pct = idle["below_util_pct"]
    if isinstance(pct, bool) or not isinstance(pct, (int, float)) or not 0 < pct <= 100:
        raise PolicyError(line("below_util_pct"), "idle.below_util_pct must be a number over 0 "
                                                  f"and at most 100, not {pct!r}")
    after = {}
    for key in ("warn_after", "stop_after"):
        try:
            after[key] = parse_duration(str(idle[key]))
        except ValueError as exc:
            raise PolicyError(line(key), f"idle.{key}: {exc}") from None
        if after[key] <= 0:
            raise PolicyError(line(key), f"idle.{key} must be longer than 0s")
    if after["stop_after"] < after["warn_after"]:
        raise PolicyError(line("stop_after"), "idle.stop_after must not come before "
                                              "idle.warn_after")
    applies = idle.get("applies_to", ["sessions"])
    if isinstance(applies, str):
        applies = [applies]
    if not isinstance(applies, list) or not applies or any(a not in APPLIES_TO
                                                             for a in applies):
        raise PolicyError(line("applies_to"), "idle.applies_to must list sessions, runs or "
                                              f"both, not {applies!r}")
    return {"below_util_pct": float(pct), "warn_after_s": after["warn_after"],
            "stop_after_s": after["stop_after"],
            "applies_to": [a for a in APPLIES_TO if a in applies]}


def policy_words(policy: dict[str, Any]) -> str:
    """One line for people: `idle: under 5 % for 1h → warned, 3h → stopped (sessions, runs)`."""
    idle = policy.get("idle")
    if not idle:
        return "no rules"
    return (f"idle: under {idle['below_util_pct']:g} % for {duration_words(idle['warn_after_s'])}"
            f" → owner warned, {duration_words(idle['stop_after_s'])} → stopped "
            f"({', '.join(idle['applies_to'])})")


# ---------------------------------------------------------------- the file, trusted or not

def policy_path() -> str:
    return os.environ.get(POLICY_VAR) or DEFAULT_POLICY


def trusted_owners(claims_folder: str) -> dict[int, str]:
    """The uids whose policy file is trusted: root, and the claims folder's owner (a real
    directory, not a link)."""
    owners = {0: "root"}
    try:
        st = os.lstat(claims_folder)
    except OSError:
        return owners
    if stat.S_ISDIR(st.st_mode):
        owners.setdefault(st.st_uid, "the claims folder's owner")
    return owners


def read_policy(path: str | None = None, claims_folder: str | None = None) -> dict[str, Any]:
    """The policy in force on this host: `{"path", "found", "policy", "ignored", "owner"}`.
    `policy` is None where there is none (no file) or the file is ignored; `ignored` then says
    why in one sentence naming the file (and the line, for a text that is not a policy)."""
    path = path or policy_path()
    reading: dict[str, Any] = {"path": path, "found": False, "policy": None, "ignored": None,
                               "owner": None}

    def ignored(why: str) -> dict[str, Any]:
        reading["ignored"] = f"the lab policy {path} is ignored: {why}"
        return reading

    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return reading
    except OSError as exc:
        reading["found"] = True
        return ignored(f"it cannot be read ({exc.strerror or exc})")
    reading["found"] = True
    if stat.S_ISLNK(st.st_mode):
        return ignored("it is a symbolic link (not followed)")
    if not stat.S_ISREG(st.st_mode):
        return ignored("it is not a regular file")
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        return ignored(f"it cannot be read ({exc.strerror or exc})")
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        data = f.read(MAX_POLICY_BYTES + 1)
    reading["owner"] = user_name(st.st_uid) or str(st.st_uid)
    owners = trusted_owners(claims_folder or claims_dir())
    if st.st_uid not in owners:
        return ignored(f"it is owned by {reading['owner']}, not by root or the claims folder's "
                       "owner")
    if st.st_mode & stat.S_IWOTH:
        return ignored("anyone may write it (mode "
                       f"{stat.S_IMODE(st.st_mode):o}; make it writable by its owner only)")
    if len(data) > MAX_POLICY_BYTES:
        return ignored(f"it is over {MAX_POLICY_BYTES} bytes")
    try:
        reading["policy"] = parse_policy(data.decode("utf-8"))
    except UnicodeDecodeError:
        return ignored("it is not UTF-8 text")
    except PolicyError as exc:
        where = f"line {exc.line}: " if exc.line else ""
        return ignored(f"{where}{exc.why}")
    return reading


def session_kind(manifest: dict[str, Any]) -> str:
    """`notebook`, `shell`, or "" for a run that is not a session: the manifest's `session`,
    else its tasks' (the task record's `session`)."""
    kind = manifest.get("session") or next(
        (t.get("session") for t in manifest.get("tasks", []) if t.get("session")), "")
    return str(kind or "")


def idle_rule_for(policy: dict[str, Any] | None, manifest: dict[str, Any]
                  ) -> dict[str, Any] | None:
    """The policy's idle rule where it applies to this run (a session, or a run where
    `applies_to` names runs), else None."""
    rule = (policy or {}).get("idle")
    if not rule:
        return None
    wanted = "sessions" if session_kind(manifest) else "runs"
    return rule if wanted in rule["applies_to"] else None
