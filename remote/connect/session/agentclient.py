"""Calling the host-side agent: one JSON line each way, one answer, failures as `RemoteError`s.

Starting the agent costs an interpreter and, unless cached, compiling the ~45 KB program
(~70 ms of host CPU per start; an `up` makes several requests per host). So:

- The program is kept on the host as `<workdir>/.tfctl/agent/agent_<sha256>.py` and imported
  from there, so Python's own bytecode cache (`__pycache__`) skips the compile. It travels
  (zlib + base64, one line) with every start and is installed or replaced by `BOOT` when the
  file is missing, so there is never an extra round trip; a host where it cannot be written runs
  it from memory. The interpreter starts with `-S` (no site-packages: the agent is stdlib only;
  `probe` loads them when it looks for TensorFlow).
- Over SSH the agent stays up as a session for the rest of the command (`agent.serve`): each
  operation is one request line and one answer line on an open channel, no new process. A host
  gets a second session only while its first is busy (the UI's pollers share a fleet).
- Transports without pipes (`transport: local`) start the same program once per operation.
"""

from __future__ import annotations

import base64
import hashlib
import json
import threading
import time
import weakref
import zlib
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from tfctl.remote.agent.wire import ACK_LINE, ANSWER_MARK, WIRE_VERSION
from tfctl.remote.connect.session.program import agent_source
from tfctl.remote.connect.transport import Pipe, Transport, shell_path
from tfctl.remote.errors import (
    AgentOutdated,
    CommandFailed,
    HostUnreachable,
    PythonMissing,
    RemoteError,
    agent_error,
)

# A host's python that cannot even start answers with the shell's "not found" status.
_NOT_FOUND = (126, 127)
_MARK = ANSWER_MARK.encode()
_ACK = ACK_LINE.encode()
MAX_IDLE_SESSIONS = 4  # per host: more only while that many operations overlap

# Runs as `python -S -c BOOT <agent file> <size>` (Python >= 3.8, stdlib only). stdin: one line
# with the program (zlib, base64), then requests. Uses the installed file when it has the right
# size (the line is then read past, not decoded), else installs it (atomically, replacing older
# versions), else runs it from memory. The collector is off while the program loads: its
# thousands of objects would set it off several times for nothing (~3 M instructions), and
# `gc.freeze` keeps them out of every later collection.
BOOT = r"""
import gc, os, sys
gc.disable()
path, size = sys.argv[1], int(sys.argv[2])
folder, name = os.path.split(path)
stdin = sys.stdin.buffer
line = stdin.readline().strip()
def decoded():
    import binascii, zlib
    return zlib.decompress(binascii.a2b_base64(line)) if line else None
try:
    here = os.stat(path).st_size == size
except OSError:
    here = False
source = None
if not here and line:
    source = decoded()
    try:
        if len(source) != size:
            raise OSError("not the program announced")
        os.makedirs(folder, exist_ok=True)
        tmp = "%s.%d.tmp" % (path, os.getpid())
        with open(tmp, "wb") as out:
            out.write(source)
        os.replace(tmp, path)
        here = True
        for sub in (folder, os.path.join(folder, "__pycache__")):
            for old in os.listdir(sub) if os.path.isdir(sub) else ():
                if old.startswith("agent_") and not old.startswith(name[:-3]):
                    try:
                        os.remove(os.path.join(sub, old))
                    except OSError:
                        pass
    except OSError:
        pass
agent = None
if here:
    sys.dont_write_bytecode = False
    sys.path[0] = folder
    try:
        agent = __import__(name[:-3])
    except ImportError:
        agent = None
if agent is None and line:
    agent = type(sys)("tfctl_agent")
    exec(compile(source or decoded(), path, "exec"), agent.__dict__)
if agent is None:
    sys.stdout.write(MARK + '{"ok": false, "v": VERSION, "kind": "agent_missing", '
                     '"error": "no agent"}\n')
    sys.exit(3)
gc.freeze()
gc.enable()
agent.serve(stdin)
""".replace("MARK", repr(ANSWER_MARK)).replace("VERSION", str(WIRE_VERSION))


@dataclass(frozen=True)
class Payload:
    """The agent program as shipped: its file name on the host, its size, and the program."""

    file_name: str
    size: int
    program: bytes

    @property
    def line(self) -> bytes:
        """The program as BOOT reads it from stdin (zlib, base64, one line): made when a
        session is first booted, not by a command whose sessions the holder lends booted
        (~10 ms of compression), and made once (`_built_once`)."""
        return _built_once(_compressed, self.program)


def _compressed(program: bytes) -> bytes:
    return base64.b64encode(zlib.compress(program, 6)) + b"\n"


def _payload() -> Payload:
    program = (agent_source() + "\n").encode()
    name = f"agent_{hashlib.sha256(program).hexdigest()[:16]}.py"
    return Payload(name, len(program), program)


_built: dict[Any, Any] = {}
_building = threading.Lock()


def _built_once(build: Any, *args: Any) -> Any:
    """`build(*args)`, computed by one thread of the process and kept: a cold command's fleet
    threads all ask for the payload at the same moment, and an `lru_cache` lets every thread
    that calls before the first call returns build it too (~12 ms to join the program before
    connecting, ~14 ms to compress it at the boot, each holding the interpreter lock: on 16
    hosts it cost a cold connect 60-230 ms of the client's CPU, benchmarks/README.md)."""
    key = (build, *args)
    with _building:
        if key not in _built:
            _built[key] = build(*args)
        return _built[key]


def payload() -> Payload:
    """The agent program, built once per process (the agent files do not change under it)."""
    found: Payload = _built_once(_payload)
    return found


def agent_command(python: str, workdir: str) -> str:
    """The shell command that starts the agent (and installs it where missing) on a host."""
    p = payload()
    where = workdir.rstrip("/") + "/.tfctl/agent/" + p.file_name
    # The agent is stdlib-only, so any Python 3 runs it: where the inventory's interpreter does not
    # exist yet (a venv that `job.setup` will create, or a path relative to the workdir) the
    # host's python3 runs the agent, and `probe` reports the configured one as missing.
    return (f"p={shell_path(python)}; command -v \"$p\" >/dev/null 2>&1 || "
            f"{{ p=python3; export TFCTL_CONFIGURED_PYTHON_MISSING=1; }}; "
            f"exec \"$p\" -S -c {shell_path(BOOT)} {shell_path(where)} {p.size}")


class _Sessions:
    """The idle agent sessions of one transport."""

    def __init__(self) -> None:
        self.idle: list[Pipe] = []
        self.lock = threading.Lock()
        self.owed: dict[int, int] = {}
        """id(pipe) → answers still to come to requests nobody waited for (`post`)."""

    def take(self) -> tuple[Pipe, int] | None:
        with self.lock:
            while self.idle:
                pipe = self.idle.pop()
                owed = self.owed.pop(id(pipe), 0)
                if pipe.alive:
                    return pipe, owed
                pipe.close()
        return None

    def drain(self) -> list[tuple[Pipe, int]]:
        """The idle sessions, each with the answers still owed on it, taken out."""
        with self.lock:
            pipes, owed, self.idle, self.owed = self.idle, self.owed, [], {}
        return [(pipe, owed.get(id(pipe), 0)) for pipe in pipes]

    def give(self, pipe: Pipe, owed: int = 0) -> None:
        with self.lock:
            if len(self.idle) < MAX_IDLE_SESSIONS:
                self.idle.append(pipe)
                if owed:
                    self.owed[id(pipe)] = owed
                return
        pipe.close()


_sessions: weakref.WeakKeyDictionary[Any, _Sessions] = weakref.WeakKeyDictionary()
_sessions_lock = threading.Lock()


def _sessions_of(transport: Any) -> _Sessions:
    with _sessions_lock:
        found = _sessions.get(transport)
        if found is None:
            found = _sessions[transport] = _Sessions()
        return found


def end_sessions(transports: Iterable[Transport], wait_s: float = 2.0) -> None:
    """End the idle agent sessions of `transports`: their input ends, and each agent exits
    (waited for, up to `wait_s` in all), so that none outlives the command that started it."""
    with _sessions_lock:
        pools = [_sessions[t] for t in transports if t in _sessions]
    pipes = []
    for pool in pools:
        for pipe, owed in pool.drain():
            if not pipe.release(owed):  # one lent by the holder (hold/) stays with it
                pipes.append(pipe)
    for pipe in pipes:
        pipe.end_input()
    deadline = time.monotonic() + wait_s
    for pipe in pipes:
        pipe.finish(max(0.0, deadline - time.monotonic()))


def prestart(transport: Transport) -> None:
    """Connect and start the host's agent session now, without waiting for it, so that it is
    up when the first request comes (sync starts it before its local listing is done)."""
    sessions = _sessions_of(transport)
    if sessions.idle:
        return
    pipe = transport.open_pipe(agent_command(transport.host.python, transport.host.workdir))
    if pipe is None:
        return
    _boot(pipe)
    sessions.give(pipe)


def post(transport: Transport, op: str, args: dict[str, Any] | None = None) -> None:
    """Send agent operation `op` on the host's idle session without waiting for its answer.

    For a last word that needs no reply (`up` telling each host's watcher that the whole run
    is up): the agent acts on it while the client goes on, and its answer is read and dropped
    by the next call on that session, or the agent sees its input end after it (`end_sessions`)
    and exits. Without an idle session (or pipes) it is an ordinary call."""
    sessions = _sessions_of(transport)
    taken = sessions.take()  # none where the transport has no pipes
    if taken is None:
        call(transport, op, args)
        return
    pipe, owed = taken
    try:
        pipe.send(_request_line(op, args))
    except BaseException:
        pipe.close()
        raise
    sessions.give(pipe, owed + 1)


def call(transport: Transport, op: str, args: dict[str, Any] | None = None,
         timeout_s: float | None = 60.0) -> Any:
    """Run agent operation `op` on the transport's host and return its `result`: wire data,
    which `agentops` reads into the vocabulary's records (agent/vocab.py)."""
    request = _request_line(op, args)
    command = agent_command(transport.host.python, transport.host.workdir)
    sessions = _sessions_of(transport)
    taken = sessions.take()
    if taken is not None:
        pipe, owed = taken
    else:
        opened = transport.open_pipe(command)
        if opened is None:  # no sessions on this transport: one process per operation
            res = transport.run(command, stdin=(payload().line + request).decode(),
                                timeout_s=timeout_s)
            answer = _marked(res.stdout.encode(errors="replace").splitlines())
            if answer is None:
                raise _no_answer(transport, op, res.exit_code, res.tail())
            _same_version(transport, op, answer)
            return _result(transport, answer)
        pipe, owed = opened, 0
        _boot(pipe)
    ack_timeout_s = timeout_s  # a new session: the interpreter may be slow to start
    if taken is not None or pipe.reused:
        # a session already up (ours, or the holder's) acknowledges within a round trip, or
        # its link is dead
        link_s = transport.options.connect_timeout_s
        ack_timeout_s = link_s if timeout_s is None else min(timeout_s, link_s)
    try:
        for _ in range(owed):  # answers to posted requests: nobody waits for them
            _read_answer(pipe, transport, "(posted)", timeout_s, ack_timeout_s)
        pipe.send(request)
        answer = _marked([_read_answer(pipe, transport, op, timeout_s, ack_timeout_s)])
        if answer is None:
            raise RemoteError(transport.host.name, f"agent {op}: unreadable answer")
        _same_version(transport, op, answer)  # else the session is closed, never lent again
    except BaseException:
        pipe.close()
        raise
    sessions.give(pipe)
    return _result(transport, answer)


def _request_line(op: str, args: dict[str, Any] | None) -> bytes:
    """One request as the agent reads it: its arguments, `op`, and the vocabulary's version."""
    return json.dumps(dict(args or {}, op=op, v=WIRE_VERSION), default=str).encode() + b"\n"


def _same_version(transport: Transport, op: str, answer: dict[str, Any]) -> None:
    """Refuse (`AgentOutdated`) an answer in another version of the vocabulary than ours: an
    agent of another tfctl, whose records we would misread. One of a newer agent refused the
    request before acting on it; one without a version is of a tfctl older than versions."""
    version = answer.get("v")
    if version == WIRE_VERSION:
        return
    said = "no version" if version is None else f"version {version}"
    raise AgentOutdated(transport.host.name, f"agent {op}: the agent session there answers in "
                        f"{said} of the wire, this tfctl in version {WIRE_VERSION}: a session "
                        "another tfctl started (`tfctl disconnect` ends the sessions held for "
                        "this user)", data=answer)


def _boot(pipe: Pipe) -> None:
    """Send a new session the agent's program (`BOOT` reads it first), unless it came booted
    (a session the holder lent, hold/borrow.py)."""
    if not pipe.booted:
        pipe.send(payload().line)


def _read_answer(pipe: Pipe, transport: Transport, op: str, timeout_s: float | None,
                 ack_timeout_s: float | None) -> bytes:
    noise: list[bytes] = []
    acked = False
    while True:
        wait_s = timeout_s if acked else ack_timeout_s
        try:
            line = pipe.read_line(wait_s)
        except TimeoutError:
            if not acked:  # the link is dead: the next call connects afresh
                transport.drop_link()
            raise HostUnreachable(transport.host.name, f"no answer within {wait_s:.0f} s "
                                  f"to agent {op}") from None
        if line is None:
            code, rest = pipe.finish()
            if code in (None, -1) and pipe.link_lost:
                # Another call's timeout closed the host's connection (a cut link): the host
                # is unreachable; nothing failed on it, so no "`python …` exited -1".
                raise HostUnreachable(transport.host.name, f"the connection dropped during "
                                      f"agent {op}")
            tail = b"".join(noise[-20:]).decode(errors="replace") + rest
            raise _no_answer(transport, op, code, "\n".join(tail.strip().splitlines()[-15:]))
        if line == _ACK:
            acked = True
        elif line.startswith(_MARK):
            return line
        else:
            noise.append(line)


def _marked(lines: list[bytes]) -> dict[str, Any] | None:
    for line in reversed(lines):
        if line.startswith(_MARK):
            try:
                value = json.loads(line[len(_MARK):])
            except ValueError:
                return None
            return value if isinstance(value, dict) else None
    return None


def _no_answer(transport: Transport, op: str, exit_code: int | None, tail: str) -> RemoteError:
    host = transport.host
    if exit_code in _NOT_FOUND:
        return PythonMissing(host.name, f"python {host.python!r} is not runnable there "
                             f"(exit {exit_code}): set `python:` for this host in the "
                             "inventory", tail)
    return CommandFailed(host.name, f"{host.python} -S -c BOOT  # agent op {op}",
                         -1 if exit_code is None else exit_code, tail)


def _result(transport: Transport, answer: dict[str, Any]) -> Any:
    if not answer.get("ok"):
        raise agent_error(transport.host.name, answer)
    return answer.get("result")
